// Live by push beyond a run's page (issue 33 item 3): the Nodes page's system charts follow
// GET /nodes/{node}/stream, and Compare's live runs one GET /runs/metrics/stream?run_ids= for
// them all, with the summaries beside the charts refreshed from what it brings. For each page:
//   quiet: the stream is up: no timer request (node metrics; run metrics and summaries while
//          the runs log nothing) for more than one polling period;
//   down:  the stream refused (the tab hidden and shown again, its reconnects aborted): polled;
//   back:  the stream let through again: after its catch-up, no timer request.
// Compare also sees one stream for both runs, and a burst of points fetched after it was pushed.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN, GPUPLANE_UI_SHOTS, GPUPLANE_UI_NODE (the node's name),
//   GPUPLANE_UI_RUN_IDS (two bursting runs, a,b), GPUPLANE_UI_BURST_DIR (their jobs look for burst-<n> there)

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { RequestLog, check, env, main, openWatchedPage, screenshot, setVisibility, signIn, until } from "./lib.mjs";

const NODE_POLL_MS = 5000; // SystemCharts' refetch period while its stream is down
const NODE_QUIET_MS = 11_000; // longer than the 10 s period it polled at on a timer before it followed the stream
const CHART_POLL_MS = 3000; // charts/loader.ts's, while the runs' stream is down
const NODE_STREAM = /^\/api\/v1\/nodes\/[^/]+\/stream$/;
const NODE_METRICS = /^\/api\/v1\/nodes\/[^/]+\/metrics$/;
const RUNS_STREAM = /^\/api\/v1\/runs\/metrics\/stream$/;
const RUN_STREAM = /^\/api\/v1\/runs\/[^/]+\/metrics\/stream$/;
const CHART = /^\/api\/v1\/runs\/(?:[^/]+\/metrics|metrics:query|metrics\/query)$/;
const SUMMARY = /^\/api\/v1\/runs\/[^/]+\/summary$/;

await main("push-pages", 110_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const runIds = env("GPUPLANE_UI_RUN_IDS").split(",");
  const burstDir = env("GPUPLANE_UI_BURST_DIR");
  const { browser, watch, page } = await openWatchedPage(result);
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"), "/jobs");
  watch.expect401 = false;

  const log = new RequestLog(browser.context, [NODE_STREAM, NODE_METRICS, RUNS_STREAM, RUN_STREAM, CHART, SUMMARY]);
  const since = (p, t) => log.since(p, t);
  const lastOpened = (stream) => log.ok.get(stream).at(-1) ?? performance.now();
  // A stream that opens brings its page up to date: `n` requests of `counted` (a run's "ready",
  // the node's readings it missed; none when a run stream resumes where it was and nothing was
  // logged meanwhile).
  const caughtUp = (tOpen, counted, n) =>
    log.caughtUp(page, tOpen, counted.map((p) => [p, n]), [NODE_STREAM, RUNS_STREAM, RUN_STREAM], 500);
  const opened = (p) => page.waitForResponse((r) => p.test(new URL(r.url()).pathname) && r.status() === 200,
    { timeout: 30_000 });
  const problemsFrom = watch.problems.length;
  const refused = [];

  /** Refuse the stream, hide and show the tab (it reconnects, refused), let it through again. */
  async function downAndBack(stream, counted, pollMs, name, catchUp) {
    const pattern = (u) => stream.test(u.pathname);
    const from = watch.problems.length;
    await page.route(pattern, (route) => route.abort("connectionrefused"));
    await setVisibility(page, "hidden");
    let t = performance.now();
    await setVisibility(page, "visible");
    await until(() => counted.every((p) => since(p, t) >= 2), pollMs * 3);
    const down = Object.fromEntries(counted.map((p) => [p.source, since(p, t)]));
    down.ms = Math.round(performance.now() - t);
    check(result, counted.every((p) => since(p, t) >= 2), `${name}: with its stream refused it did not poll: ${JSON.stringify(down)}`);
    const back = opened(stream);
    await page.unroute(pattern);
    await back;
    refused.push([from, watch.problems.length]);
    await caughtUp(lastOpened(stream), counted, catchUp);
    t = performance.now();
    await page.waitForTimeout(pollMs + 1000);
    const after = Object.fromEntries(counted.map((p) => [p.source, since(p, t)]));
    check(result, counted.every((p) => since(p, t) === 0), `${name}: with its stream open again it still asked: ${JSON.stringify(after)}`);
    return { down, back: after };
  }

  result.at = "the node's charts";
  const nodeOpen = opened(NODE_STREAM);
  await page.goto(new URL(`/nodes?node=${encodeURIComponent(env("GPUPLANE_UI_NODE"))}`, base).href);
  await nodeOpen;
  await page.waitForSelector(".system-panel", { timeout: 15_000 });
  await page.waitForTimeout(500);
  let t = performance.now();
  await page.waitForTimeout(NODE_QUIET_MS);
  result.node = { quiet: { ms: Math.round(performance.now() - t), metrics_requests: since(NODE_METRICS, t) } };
  check(result, result.node.quiet.metrics_requests === 0,
    `the node's charts asked ${result.node.quiet.metrics_requests} times with their stream up`);
  Object.assign(result.node, await downAndBack(NODE_STREAM, [NODE_METRICS], NODE_POLL_MS, "the node's charts", 1));
  await screenshot(page, "push-node");

  result.at = "Compare";
  let bursts = 0;
  const burst = () => writeFileSync(join(burstDir, `burst-${++bursts}`), "");
  const runsOpen = opened(RUNS_STREAM);
  const before = { runs: log.asked.get(RUNS_STREAM).length, run: log.asked.get(RUN_STREAM).length };
  await page.goto(new URL(`/compare?runs=${runIds.join(",")}`, base).href);
  await runsOpen;
  const points = () => page.evaluate(() => Number(document.querySelector('.chart-panel[data-metric="loss"]')?.dataset.points ?? 0));
  await page.waitForFunction(() => Number(document.querySelector('.chart-panel[data-metric="loss"]')?.dataset.points ?? 0) > 0,
    null, { timeout: 15_000 });
  await page.waitForFunction(() => document.querySelectorAll('[aria-busy="true"], .chart-skeleton').length === 0);
  await caughtUp(lastOpened(RUNS_STREAM), [CHART], runIds.length);
  result.compare = { streams: { several: log.asked.get(RUNS_STREAM).length - before.runs, one_run: log.asked.get(RUN_STREAM).length - before.run } };
  check(result, result.compare.streams.several === 1 && result.compare.streams.one_run === 0,
    `Compare's two live runs did not share one stream: ${JSON.stringify(result.compare.streams)}`);
  t = performance.now();
  await page.waitForTimeout(2 * CHART_POLL_MS + 500);
  result.compare.quiet = { chart_requests: since(CHART, t), summary_requests: since(SUMMARY, t) };
  check(result, result.compare.quiet.chart_requests === 0 && result.compare.quiet.summary_requests === 0,
    `Compare asked with its stream up and nothing logged: ${JSON.stringify(result.compare.quiet)}`);

  const was = await points();
  t = performance.now();
  burst();
  await page.waitForFunction((n) => Number(document.querySelector('.chart-panel[data-metric="loss"]')?.dataset.points ?? 0) > n,
    was, { timeout: 15_000 });
  await until(() => since(SUMMARY, t) >= 2, 8000); // each run's summary, asked with the announcement
  result.compare.pushed = { before: was, after: await points(), chart_requests: since(CHART, t), summary_requests: since(SUMMARY, t) };
  check(result, result.compare.pushed.summary_requests >= 2, `Compare's summaries did not follow the pushed points: ${JSON.stringify(result.compare.pushed)}`);
  await page.waitForTimeout(3500); // the summaries' throttle lets its last one go
  Object.assign(result.compare, await downAndBack(RUNS_STREAM, [CHART], CHART_POLL_MS, "Compare's charts", 0));
  await screenshot(page, "push-compare");

  delete result.at;
  // The refused reconnects (a failed request and chromium's console line for each) are this script's doing.
  result.problems = watch.problems.slice(problemsFrom).filter((p, i) => !(refused.some(([a, b]) => i + problemsFrom >= a
    && i + problemsFrom < b) && /ERR_CONNECTION_REFUSED/.test(p) && (/\/stream/.test(p) || /^console error .*Failed to load resource/.test(p))));
  for (const p of result.problems) result.failures.push(p);
});
