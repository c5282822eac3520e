// Live by push (issue 33 item 3): a run's chart follows GET /runs/{id}/metrics/stream and polls
// only while that stream is down. The run's job logs a burst of points each time this script
// makes a file burst-<n> in GPUPLANE_UI_BURST_DIR, and nothing between bursts. Counted are the
// page's chart requests (GET /runs/{id}/metrics, POST /runs/metrics/query):
//   quiet:  the stream is up, its "ready" caught up, and nothing is logged for QUIET_MS (more
//           than two polling periods): no chart request at all;
//   pushed: a burst: the chart gains its points, fetched after the stream announced them;
//   down:   the stream refused (the tab hidden and shown again, its reconnects aborted): the
//           chart polls, and gains the next burst's points that way;
//   back:   the stream let through again: it reopens and, after its "ready" catch-up, no chart
//           request for BACK_MS (more than one polling period).
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN, GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_RUN_ID     the bursting run; GPUPLANE_UI_BURST_DIR where its job looks for burst-<n>

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { RequestLog, check, env, main, openWatchedPage, screenshot, setVisibility, signIn, until } from "./lib.mjs";

const POLL_MS = 3000; // the chart's polling period while its stream is down (charts/loader.ts)
const QUIET_MS = 2 * POLL_MS + 500;
const BACK_MS = POLL_MS + 500;
const CHART_REQUEST = /^\/api\/v1\/runs\/(?:[^/]+\/metrics|metrics\/query)$/;
const STREAM = /^\/api\/v1\/runs\/[^/]+\/metrics\/stream$/;
const SUMMARY = /^\/api\/v1\/runs\/[^/]+\/summary$/; // the headline: it follows the stream too

await main("push", 90_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const runId = env("GPUPLANE_UI_RUN_ID");
  const burstDir = env("GPUPLANE_UI_BURST_DIR");
  const { browser, watch, page } = await openWatchedPage(result);
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"), "/jobs");
  watch.expect401 = false;

  const log = new RequestLog(browser.context, [CHART_REQUEST, STREAM, SUMMARY]);
  const points = () => page.evaluate(() => Number(document.querySelector('.chart-panel[data-metric="loss"]')?.dataset.points ?? 0));
  const grows = (before, timeout) => page.waitForFunction((n) =>
    Number(document.querySelector('.chart-panel[data-metric="loss"]')?.dataset.points ?? 0) > n, before, { timeout });
  const since = (t) => log.since(CHART_REQUEST, t);
  const summariesSince = (t) => log.since(SUMMARY, t);
  const opens = log.ok.get(STREAM);
  const streamTries = () => log.asked.get(STREAM).length;
  let bursts = 0;
  const burst = () => writeFileSync(join(burstDir, `burst-${++bursts}`), "");

  result.at = "the run's page";
  const opened = page.waitForResponse((r) => STREAM.test(new URL(r.url()).pathname) && r.status() === 200);
  await page.goto(new URL(`/runs/${runId}`, base).href);
  await opened;
  await grows(0, 15_000);
  await page.waitForFunction(() => document.querySelectorAll('[aria-busy="true"], .chart-skeleton').length === 0);
  await until(() => opens.length > 0, 5000);
  // The stream's "ready" brings the chart up to date with a request of its own.
  await log.caughtUp(page, opens[0] ?? performance.now(), [[CHART_REQUEST, 1]], [STREAM], 200);

  result.at = "quiet";
  let t = performance.now();
  await page.waitForTimeout(QUIET_MS); // the span is the check: nothing may ask in it
  result.quiet = { ms: QUIET_MS, chart_requests: since(t), summary_requests: summariesSince(t) };
  check(result, result.quiet.chart_requests === 0,
    `with the stream up and nothing logged, the chart asked ${result.quiet.chart_requests} times in ${QUIET_MS} ms`);
  check(result, result.quiet.summary_requests === 0,
    `with the stream up and nothing logged, the headline asked ${result.quiet.summary_requests} times in ${QUIET_MS} ms`);

  result.at = "pushed";
  let before = await points();
  t = performance.now();
  burst();
  await grows(before, 15_000);
  await until(() => summariesSince(t) > 0, 5000); // the headline's refresh, asked with the announcement
  result.pushed = { before, after: await points(), grew_ms: Math.round(performance.now() - t), chart_requests: since(t),
    summary_requests: summariesSince(t) };
  check(result, result.pushed.chart_requests >= 1, "the pushed points came with no chart request");
  check(result, result.pushed.summary_requests >= 1, "the headline did not follow the pushed points");

  result.at = "down";
  // The stream is refused from now on; hiding the tab closes it, showing it again reconnects.
  const streamPattern = (u) => STREAM.test(u.pathname);
  const refusedFrom = watch.problems.length;
  await page.route(streamPattern, (route) => route.abort("connectionrefused"));
  const refusedBefore = streamTries();
  await setVisibility(page, "hidden");
  await setVisibility(page, "visible");
  before = await points();
  t = performance.now();
  burst();
  await grows(before, 15_000);
  result.down = { before, after: await points(), grew_ms: Math.round(performance.now() - t), chart_requests: since(t),
    stream_tries: streamTries() - refusedBefore };
  check(result, result.down.stream_tries >= 1, "the hidden and shown tab did not try its stream again");

  result.at = "back";
  const reopened = page.waitForResponse((r) => STREAM.test(new URL(r.url()).pathname) && r.status() === 200, { timeout: 30_000 });
  const opensBefore = opens.length;
  await page.unroute(streamPattern);
  await reopened;
  await until(() => opens.length > opensBefore, 5000);
  const tOpen = opens[opensBefore] ?? performance.now();
  // Its "ready" brings the chart up to date, and the headline's polling stops with one last
  // fetch: one request each, at once. Then nothing.
  await log.caughtUp(page, tOpen, [[CHART_REQUEST, 1], [SUMMARY, 1]], [STREAM], 200);
  t = performance.now();
  await page.waitForTimeout(BACK_MS);
  result.back = { ms: BACK_MS, chart_requests: since(t), summary_requests: summariesSince(t) };
  check(result, result.back.chart_requests === 0,
    `with the stream open again the chart still asked ${result.back.chart_requests} times in ${BACK_MS} ms`);
  check(result, result.back.summary_requests === 0,
    `with the stream open again the headline still asked ${result.back.summary_requests} times in ${BACK_MS} ms`);
  const refusedTo = watch.problems.length;
  await screenshot(page, "push-run");

  delete result.at;
  // The refused reconnects (a failed request and chromium's console line for each) are this
  // script's doing; anything else is a problem.
  result.problems = watch.problems.filter((p, i) => !(i >= refusedFrom && i < refusedTo && /ERR_CONNECTION_REFUSED/.test(p)
    && (/metrics\/stream/.test(p) || /^console error .*Failed to load resource/.test(p))));
  for (const p of result.problems) result.failures.push(p);
});
