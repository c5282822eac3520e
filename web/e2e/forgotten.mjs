// After `node forget` (issue 33 item 4): the Events page, filtered to the forgotten node's
// id, still names the node in each event's Subject (the name the server kept in the event's
// context), marked forgotten, never a bare nd_… id.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN (read), GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_NODE_ID    the forgotten node's id
//   GPUPLANE_UI_NODE_NAME  its name

import { check, env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

await main("forgotten", 45_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const nodeId = env("GPUPLANE_UI_NODE_ID");
  const nodeName = env("GPUPLANE_UI_NODE_NAME");

  const { watch, page } = await openWatchedPage(result);
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"), `/events?node_id=${nodeId}`);
  watch.expect401 = false;

  // The forgotten node's events (the node list has loaded: "(forgotten)" is said only then).
  const subjects = page.locator(`.events-table [data-forgotten-node="${nodeId}"]`);
  await page.locator(`.events-table [data-forgotten-node="${nodeId}"]`, { hasText: "(forgotten)" }).first().waitFor();
  result.subjects = (await subjects.allTextContents()).map((t) => t.trim());
  result.events = await page.locator(".events-table tbody tr").count();
  check(result, result.subjects.length > 0 && result.subjects.length === result.events,
    `${result.subjects.length} of ${result.events} events name the forgotten node`);
  check(result, result.subjects.every((t) => t === `${nodeName} (forgotten)`), `the subjects read ${JSON.stringify(result.subjects)}`);
  result.raw_ids = await page.evaluate((id) => document.querySelector(".events-table tbody").innerText.includes(id), nodeId);
  check(result, !result.raw_ids, "the table shows the node's raw id");
  await screenshot(page, "events-forgotten-node-light");

  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
