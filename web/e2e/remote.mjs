// A remote agent's node on a server's UI (issue 18), in one of two phases the pytest side sets
// up: "attached" (the agent is up) and "detached" (the agent was killed). The Nodes page shows
// the node's link as a badge with its last heartbeat, backlog and skew; the page of a job that
// runs on it names the node (a link to it) and says its log is live, then, once the agent is
// gone, that it has only the tail the server keeps, still showing those lines.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN (read), GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_PHASE      attached or detached
//   GPUPLANE_UI_NODE_NAME  the agent's node
//   GPUPLANE_UI_JOB_ID     a job that runs on it, printing "tick N" lines (GPUPLANE_UI_JOB_NAME)

import { check, env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

await main("remote", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const phase = env("GPUPLANE_UI_PHASE");
  const nodeName = env("GPUPLANE_UI_NODE_NAME");
  const jobId = env("GPUPLANE_UI_JOB_ID");
  const jobName = env("GPUPLANE_UI_JOB_NAME");

  const { watch, page } = await openWatchedPage(result);
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"), "/nodes");
  watch.expect401 = false;

  // The Nodes page: the agent's row, its link badge in the state of this phase.
  result.at = "/nodes";
  const row = page.locator(`tbody tr[data-node="${nodeName}"]`);
  await row.locator(`[data-link="${phase}"]`).waitFor();
  const heads = await page.locator(".table thead th").allTextContents();
  const cells = await row.locator("td").allTextContents();
  result.nodes_row = Object.fromEntries(heads.map((h, i) => [h, cells[i]?.trim()]));
  check(result, result.nodes_row.Link === phase, `the node's link reads ${JSON.stringify(result.nodes_row.Link)}`);
  check(result, /^(just now|\d+s ago)$/.test(result.nodes_row.Heartbeat ?? ""),
    `the node's heartbeat reads ${JSON.stringify(result.nodes_row.Heartbeat)}`);
  check(result, /^(0|[\d,]+ · .+)$/.test(result.nodes_row.Backlog ?? ""), `the backlog reads ${JSON.stringify(result.nodes_row.Backlog)}`);
  check(result, /^[+−]\d+ (ms|s)$/.test(result.nodes_row.Skew ?? ""), `the skew reads ${JSON.stringify(result.nodes_row.Skew)}`);
  // Its details (the only node: it is the one shown) say the same.
  await page.locator(".kv-row", { hasText: "Clock skew" }).waitFor();
  result.detail_link = (await page.locator(".kv-row", { hasText: "Link" }).first().locator("dd").textContent())?.trim();
  await screenshot(page, `nodes-remote-${phase}-light`);

  // The job's page: its node by name, linked, and where its log comes from.
  result.at = `/jobs/${jobId}`;
  await page.goto(new URL(`/jobs/${jobId}`, base).href);
  await page.getByRole("heading", { name: jobName }).waitFor();
  const nodeLink = page.locator(".job-info .kv-row", { hasText: "Node" }).locator("a");
  await nodeLink.waitFor();
  result.job_node = { text: (await nodeLink.textContent())?.trim(), href: await nodeLink.getAttribute("href") };
  check(result, result.job_node.text === nodeName && result.job_node.href === `/nodes?node=${nodeName}`,
    `the job's node is shown as ${JSON.stringify(result.job_node)}`);
  const source = page.locator(".log-toolbar [data-log-source]");
  const wanted = phase === "attached" ? "live" : `tail only: node ${nodeName} is offline`;
  await page.locator(".log-toolbar [data-log-source]", { hasText: wanted }).waitFor();
  result.log_source = (await source.textContent())?.trim();
  await page.waitForFunction(() => document.querySelectorAll(".log-row").length > 0);
  result.log_lines = await page.evaluate(() => [...document.querySelectorAll(".log-row .log-text")].map((e) => e.textContent));
  check(result, result.log_lines.length > 0 && result.log_lines.every((l, i) => l === `tick ${i}`),
    `the log view shows ${JSON.stringify(result.log_lines.slice(0, 5))}…`);
  await screenshot(page, `job-remote-${phase}-light`);

  delete result.at;
  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
