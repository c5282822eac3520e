// Every page, light and dark: each loads (a deep link, signed in) with no console error and
// no failed request, and shows what it is for; a screenshot of each. On the live run's page
// the charts show the logged series and follow the run (the chart's points grow); on the
// Nodes page the daemon's own node is "local", with no link columns.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN, GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_RUN_ID    a run whose job is still logging (GPUPLANE_UI_METRICS: its metrics, "loss,acc")
//   GPUPLANE_UI_RUN_NAME  its name
//   GPUPLANE_UI_JOB_ID    its job (GPUPLANE_UI_JOB_NAME)
//   GPUPLANE_UI_RUN2_ID   a finished run with the same metrics (GPUPLANE_UI_RUN2_NAME), for Compare

import { check, env, main, openWatchedPage, screenshot, setTheme, signIn } from "./lib.mjs";

const NOT_BUSY = () => document.querySelectorAll('[aria-busy="true"], .chart-skeleton').length === 0;

/** Every chart panel of `names` holds points, and its readout is written. */
function chartsDrawn(names) {
  return names.every((n) => {
    const panel = document.querySelector(`.chart-panel[data-metric="${CSS.escape(n)}"]`);
    return panel && Number(panel.dataset.points) > 0 && panel.querySelector("canvas") &&
      (panel.querySelector(".readout")?.textContent ?? "") !== "";
  });
}

await main("pages", 80_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const token = env("GPUPLANE_UI_TOKEN");
  const runId = env("GPUPLANE_UI_RUN_ID");
  const runName = env("GPUPLANE_UI_RUN_NAME");
  const jobId = env("GPUPLANE_UI_JOB_ID");
  const jobName = env("GPUPLANE_UI_JOB_NAME");
  const run2Id = env("GPUPLANE_UI_RUN2_ID");
  const run2Name = env("GPUPLANE_UI_RUN2_NAME");
  const metrics = env("GPUPLANE_UI_METRICS", "loss,acc").split(",");

  const { browser, watch, page } = await openWatchedPage(result);
  await signIn(page, base, token);
  watch.expect401 = false;

  const PAGES = [
    { name: "dashboard", path: "/", ready: async () => {
      await page.getByRole("heading", { name: "Dashboard", exact: true }).waitFor();
      await page.waitForFunction(() => document.querySelectorAll(".gpu-grid tbody tr").length >= 2);
      await page.locator(".recent-runs").getByRole("link", { name: runName }).waitFor();
    } },
    { name: "jobs", path: "/jobs", ready: async () => {
      await page.locator("table").getByRole("link", { name: jobName, exact: true }).first().waitFor();
    } },
    { name: "job", path: `/jobs/${jobId}`, ready: async () => {
      await page.getByRole("heading", { name: jobName }).waitFor();
      await page.waitForFunction(() => document.querySelectorAll(".log-row").length > 0);
    } },
    { name: "runs", path: "/runs", ready: async () => {
      await page.locator(".runs-table").getByRole("link", { name: runName, exact: true }).waitFor();
      await page.locator(".runs-table").getByRole("link", { name: run2Name, exact: true }).waitFor();
    } },
    { name: "run", path: `/runs/${runId}`, ready: async () => {
      await page.waitForFunction(chartsDrawn, metrics);
    } },
    { name: "sweeps", path: "/sweeps", ready: async () => {
      await page.getByRole("heading", { name: "Sweeps", exact: true }).waitFor();
      await page.waitForFunction(() => !!document.querySelector(".sweeps-table, .empty"));
    } },
    { name: "compare", path: `/compare?runs=${runId},${run2Id}`, ready: async () => {
      await page.waitForFunction(chartsDrawn, metrics);
    } },
    { name: "nodes", path: "/nodes", ready: async () => {
      await page.getByRole("heading", { name: "GPUs", exact: true }).waitFor();
      await page.waitForFunction(() => document.querySelectorAll(".system-panel canvas").length >= 4);
    } },
    { name: "events", path: "/events", ready: async () => {
      await page.getByRole("heading", { name: "Events", exact: true }).waitFor();
      await page.waitForFunction(() => !!document.querySelector(".events-table, .empty"));
    } },
  ];

  // Every API request, by page: the runs list must not ask for each run on its own.
  let requests = [];
  browser.context.on("request", (r) => {
    const u = new URL(r.url());
    if (u.pathname.startsWith("/api/")) requests.push(`${r.method()} ${u.pathname}`);
  });

  result.pages = [];
  for (const theme of ["light", "dark"]) {
    await setTheme(page, theme);
    for (const p of PAGES) {
      const before = watch.problems.length;
      const t0 = performance.now();
      result.at = `${p.path} (${theme})`;
      requests = [];
      await page.goto(new URL(p.path, base).href);
      await p.ready();
      await page.waitForFunction(NOT_BUSY);
      const ms = Math.round(performance.now() - t0);
      check(result, new URL(page.url()).pathname === new URL(p.path, base).pathname, `${p.path} moved to ${page.url()}`);
      check(result, (await page.evaluate(() => document.documentElement.dataset.theme)) === theme,
        `${p.path}: the theme is not ${theme}`);
      const shot = await screenshot(page, `${p.name}-${theme}`);
      result.pages.push({ name: p.name, theme, path: p.path, ready_ms: ms, shot, problems: watch.problems.slice(before),
        api_requests: requests.length });
      if (p.name === "runs") {
        const perRun = requests.filter((r) => /^GET \/api\/v1\/runs\/[^/]+$/.test(r));
        check(result, perRun.length === 0, `the runs list asked for runs one by one: ${perRun.join(", ")}`);
      }
      if (p.name === "nodes" && theme === "light") result.nodes = await localLink(page, result);
      if (p.name === "run" && theme === "light") result.chart = await liveChart(page, metrics, result);
      if (p.name === "compare" && theme === "light") result.compare = await compareReadout(page, metrics, [runName, run2Name], result);
    }
  }
  delete result.at;
  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});

/** The run's charts: a canvas each, the series named, and the points growing while it logs. */
async function liveChart(page, metrics, result) {
  const read = () => page.evaluate((names) => Object.fromEntries(names.map((n) => {
    const panel = document.querySelector(`.chart-panel[data-metric="${CSS.escape(n)}"]`);
    return [n, {
      title: panel?.querySelector(".chart-title")?.textContent ?? null,
      canvas: !!panel?.querySelector("canvas.uplot, .uplot canvas"),
      points: Number(panel?.dataset.points ?? 0),
      readout: panel?.querySelector(".readout")?.textContent ?? "",
      x: panel?.querySelector(".readout-x")?.textContent ?? "",
      value: panel?.querySelector(".readout-item b")?.textContent ?? "",
    }];
  })), metrics);
  const first = await read();
  for (const [name, c] of Object.entries(first)) {
    check(result, c.canvas, `run page: no uPlot canvas for ${name}`);
    check(result, c.title === name, `run page: the chart of ${name} is titled ${JSON.stringify(c.title)}`);
    check(result, /^step [\d,]+$/.test(c.x) && /\d/.test(c.value),
      `run page: the readout of ${name} is ${JSON.stringify(c.readout)}`);
  }
  // Live: the job keeps logging; the page asks for the tail every few seconds.
  const t0 = performance.now();
  await page.waitForFunction(({ names, before }) => names.every((n) => {
    const panel = document.querySelector(`.chart-panel[data-metric="${CSS.escape(n)}"]`);
    return Number(panel?.dataset.points ?? 0) > before[n];
  }), { names: metrics, before: Object.fromEntries(Object.entries(first).map(([n, c]) => [n, c.points])) },
  { timeout: 20_000 });
  const later = await read();
  const step = (text) => Number((/^step ([\d,]+)$/.exec(text)?.[1] ?? "-1").replaceAll(",", ""));
  for (const name of metrics) {
    check(result, step(later[name].x) > step(first[name].x),
      `run page: the readout of ${name} did not move on: ${first[name].x} -> ${later[name].x}`);
  }
  return { first, later, grew_after_ms: Math.round(performance.now() - t0) };
}

/** The daemon's own node: no link columns in the list (no node is remote), "local" in its details. */
async function localLink(page, result) {
  const heads = await page.locator(".table thead th").allTextContents();
  const link = (await page.locator(".kv-row", { hasText: "Link" }).first().locator("dd").textContent())?.trim();
  check(result, !heads.includes("Link"), `nodes: a link column with no remote node: ${heads}`);
  check(result, link === "local", `nodes: the node's link reads ${JSON.stringify(link)}`);
  return { heads, link };
}

/** Compare: one chart per metric, its readout naming each run. The charts may draw before the
 * runs' records are in (a loaded box, or the browser's six connections busy), the readout
 * naming runs by id until then: each gets 10 s to name them. */
async function compareReadout(page, metrics, labels, result) {
  const out = {};
  for (const name of metrics) {
    const panel = page.locator(`.chart-panel[data-metric="${name}"]`);
    await page.waitForFunction(({ metric, wanted }) => {
      const shown = [...document.querySelectorAll(`.chart-panel[data-metric="${metric}"] .readout-run`)].map((e) => e.textContent);
      return wanted.every((label) => shown.includes(label));
    }, { metric: name, wanted: labels }, { timeout: 10_000, polling: 100 }).catch(() => undefined);  // checked below
    const runs = await panel.locator(".readout-run").allTextContents();
    out[name] = runs;
    for (const label of labels) check(result, runs.includes(label), `compare: the ${name} readout lacks ${label}: ${runs}`);
    check(result, await panel.locator("canvas").count() > 0, `compare: no canvas for ${name}`);
  }
  return out;
}
