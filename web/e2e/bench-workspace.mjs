// The browser side of bench/ui_bench.py's Experiments workspace figures (issue 33 item 6):
// Debian's chromium (playwright-core, a fresh profile, headless) signed in with a read token.
// Prints one JSON line. Not a test: tests/ui/test_ui_e2e.py runs only the scripts it names.
//
//   node e2e/bench-workspace.mjs open URL PATH LOADS
//     Opens PATH (/experiments?p=...) LOADS times, each in a new tab (the first with an empty
//     cache), and reports per load the ms from navigation start to the first and the last chart
//     panel drawn with points (MetricPanel's "gpuplane:chart-drawn:<metric>" marks), and to
//     "all drawn": every panel marked and every metric's series loaded for every run
//     (.viz-panels data-loaded = data-metrics), seen by a poller that runs each frame.
//   node e2e/bench-workspace.mjs brush URL PATH DRAGS
//     Opens PATH (a sweep's), waits for the parallel coordinates, then drags a brush DRAGS times
//     along the first and the last axis (60 pointer moves each) under a Chrome trace: per frame
//     (BeginMainThreadFrame to the next) the renderer main thread's busy time (its RunTask
//     slices; and their CPU time, tdur), over the frames inside each drag (marks bench:drag-start .. bench:drag-end). A
//     drag that finds the chart gone (its brushes hid it) reloads PATH first, outside the marks.
//   node e2e/bench-workspace.mjs follow URL PATH SECONDS
//     Opens PATH (live runs), waits for the charts, then reads CDP Performance.getMetrics
//     before and after SECONDS: the main thread's busy share (TaskDuration / wall time), its CPU
//     share (ThreadTime, which a loaded machine does not stretch) and its script, layout and
//     style parts; and how far the charts' points moved on.
// Env: GPUPLANE_TOKEN (signs in first), GPUPLANE_CHROMIUM (default /usr/bin/chromium).

import { writeFileSync } from "node:fs";
import { openBrowser, signIn } from "./lib.mjs";

const [mode, base, path, countArg] = process.argv.slice(2);
if (!["open", "brush", "follow"].includes(mode) || !base || !path) {
  console.error("usage: node e2e/bench-workspace.mjs open|brush|follow URL PATH LOADS|DRAGS|SECONDS");
  process.exit(2);
}
const count = Number(countArg ?? (mode === "follow" ? 20 : 5));
const VIEWPORT = { width: 1600, height: 1400 };  // every panel of 8 in view: none waits to be scrolled to

// Installed in every page before the app: the first frame at which every chart is drawn.
function watchDrawn() {
  const marks = () => performance.getEntriesByType("mark").filter((m) => m.name.startsWith("gpuplane:chart-drawn:"));
  window.__allDrawnMs = null;
  const tick = () => {
    const grid = document.querySelector(".viz-panels");
    const panels = document.querySelectorAll(".viz-panels .chart-panel").length;
    if (grid && panels > 0 && marks().length >= panels
        && Number(grid.dataset.loaded) >= Number(grid.dataset.metrics) && Number(grid.dataset.metrics) > 0) {
      window.__allDrawnMs = performance.now();
      return;
    }
    requestAnimationFrame(tick);
  };
  requestAnimationFrame(tick);
}

const browser = await openBrowser({ viewport: VIEWPORT });
const { context } = browser;
context.setDefaultTimeout(60_000);
context.setDefaultNavigationTimeout(60_000);
await context.addInitScript(watchDrawn);
const out = { mode, path };
try {
  if (process.env.GPUPLANE_TOKEN) {
    const page = context.pages()[0] ?? await context.newPage();
    await signIn(page, base, process.env.GPUPLANE_TOKEN);
    if (mode === "open") {
      const cdp = await context.newCDPSession(page);
      await cdp.send("Network.clearBrowserCache");
      await cdp.detach();
    }
    await page.close();
  }
  if (mode === "open") await open(out);
  else if (mode === "brush") await brush(out);
  else await follow(out);
} catch (error) {
  out.error = String(error?.stack ?? error);
} finally {
  await browser.close();
}
process.stdout.write(`${JSON.stringify(out)}\n`);

async function open(result) {
  result.loads = [];
  for (let i = 0; i < count; i++) {
    const page = await context.newPage();
    await page.goto(new URL(path, base).href);
    await page.waitForFunction(() => window.__allDrawnMs !== null, null, { timeout: 60_000, polling: 100 });
    result.loads.push(await page.evaluate(() => {
      const marks = performance.getEntriesByType("mark").filter((m) => m.name.startsWith("gpuplane:chart-drawn:"))
        .map((m) => m.startTime);
      const grid = document.querySelector(".viz-panels");
      const requests = performance.getEntriesByType("resource").filter((r) => r.name.includes("/metrics"));
      const runs = performance.getEntriesByType("resource").find((r) => r.name.includes("/workspace/runs"));
      return {
        charts: document.querySelectorAll(".viz-panels .chart-panel").length,
        metrics_loaded: Number(grid?.dataset.loaded ?? 0),
        first_chart_ms: Math.min(...marks),
        last_chart_ms: Math.max(...marks),
        all_drawn_ms: window.__allDrawnMs,
        workspace_runs: runs ? { start_ms: runs.startTime, end_ms: runs.responseEnd, bytes: runs.encodedBodySize } : null,
        metrics_requests: requests.length,
        metrics_bytes: requests.reduce((n, r) => n + r.encodedBodySize, 0),
        last_metrics_end_ms: requests.length ? Math.max(...requests.map((r) => r.responseEnd)) : null,
        points: Math.max(0, ...[...document.querySelectorAll(".viz-panels .chart-panel")]
          .map((p) => Number(p.dataset.points ?? 0))),
      };
    }));
    await page.close();
  }
}

/** The renderer main thread's busy ms per frame, from a Chrome trace's events: the frames
 * (BeginMainThreadFrame to the next) inside each bench:drag-start .. bench:drag-end pair. */
function framesFromTrace(events) {
  const named = (name) => events.filter((e) => e.name === name);
  const marks = (label) => events.filter((e) => e.name === label && e.cat?.includes("blink.user_timing"))
    .sort((a, b) => a.ts - b.ts);
  const starts = marks("bench:drag-start");
  const ends = marks("bench:drag-end");
  if (!starts.length || starts.length !== ends.length) return { error: "the trace lacks drag marks" };
  const frames = [];
  let windowUs = 0;
  starts.forEach((start, i) => {
    const end = ends[i];
    const main = named("thread_name").find((t) => t.pid === start.pid && t.args?.name === "CrRendererMain");
    const tid = main?.tid ?? start.tid;
    const mine = (e) => e.pid === start.pid && e.tid === tid;
    // A task's wall time (dur) and, for its share of each frame, its CPU time (tdur: what a loaded
    // machine's scheduling does not stretch).
    const tasks = named("RunTask").filter((e) => mine(e) && e.ph === "X" && e.ts < end.ts && e.ts + (e.dur ?? 0) > start.ts)
      .map((e) => [e.ts, e.ts + (e.dur ?? 0), e.dur ? (e.tdur ?? e.dur) / e.dur : 1]);
    const begins = named("BeginMainThreadFrame").filter(mine).map((e) => e.ts)
      .filter((ts) => ts >= start.ts && ts <= end.ts).sort((a, b) => a - b);
    for (let k = 0; k + 1 < begins.length; k++) {
      const [a, b] = [begins[k], begins[k + 1]];
      let busy = 0;
      let cpu = 0;
      for (const [s0, e0, share] of tasks) {
        if (e0 > a && s0 < b) {
          const part = Math.min(e0, b) - Math.max(s0, a);
          busy += part;
          cpu += part * share;
        }
      }
      frames.push({ busy_ms: busy / 1000, cpu_ms: cpu / 1000, interval_ms: (b - a) / 1000 });
    }
    windowUs += end.ts - start.ts;
  });
  return { frames, window_ms: windowUs / 1000 };
}

function p95(values) {
  if (!values.length) return null;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * 0.95) - 1)];
}

async function brush(result) {
  const page = await context.newPage();
  result.page_errors = [];
  page.on("pageerror", (e) => result.page_errors.push(String(e).slice(0, 300)));
  page.on("console", (m) => { if (m.type() === "error") result.page_errors.push(m.text().slice(0, 300)); });
  const rows = () => page.evaluate(() => {
    const pc = document.querySelector(".viz-pc");
    return pc ? { rows: Number(pc.dataset.rows ?? 0), passing: Number(pc.dataset.passing ?? 0) } : null;
  });
  /** The page as PATH gives it (no brush), its parallel coordinates drawn: their canvas's box. */
  const fresh = async () => {
    await page.goto(new URL(path, base).href);
    const canvas = page.locator(".viz-pc canvas").first();
    await canvas.waitFor({ state: "visible", timeout: 60_000 });
    await page.waitForFunction(() => Number(document.querySelector(".viz-pc")?.dataset.rows ?? 0) > 0, null,
      { timeout: 60_000, polling: 100 });
    await canvas.scrollIntoViewIfNeeded();
    return canvas.boundingBox();
  };
  let box = await fresh();
  result.rows = (await rows()).rows;
  const cdp = await context.newCDPSession(page);
  const chunks = [];
  cdp.on("Tracing.dataCollected", (e) => chunks.push(...e.value));
  const done = new Promise((resolve) => cdp.once("Tracing.tracingComplete", resolve));
  await cdp.send("Tracing.start", {
    traceConfig: { includedCategories: ["devtools.timeline", "disabled-by-default-devtools.timeline",
      "disabled-by-default-devtools.timeline.frame", "blink.user_timing", "__metadata"] },
    transferMode: "ReportEvents",
  });
  result.passing_after = [];
  result.reloads = 0;
  let dragMs = 0;
  for (let i = 0; i < count; i++) {
    if (!(await page.locator(".viz-pc canvas").first().isVisible())) {
      box = await fresh();  // the brushes hid the chart: start again from the page without them
      result.reloads++;
    }
    // The first or the last axis (ParallelCoords' MARGIN: left and right 44, top 36, bottom 14),
    // over a middle part of it, as a user narrows a range down.
    const x = i % 2 ? box.x + box.width - 44 : box.x + 44;
    const span = box.height - 50;
    const [from, to] = i % 4 < 2 ? [0.15, 0.85] : [0.85, 0.15];
    const t0 = Date.now();
    await page.evaluate(() => performance.mark("bench:drag-start"));
    await page.mouse.move(x, box.y + 36 + from * span);
    await page.mouse.down();
    await page.mouse.move(x, box.y + 36 + ((from + to) / 2) * span, { steps: 30 });
    await page.mouse.move(x, box.y + 36 + to * span, { steps: 30 });
    await page.mouse.up();
    await page.evaluate(() => new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve))));
    await page.evaluate(() => performance.mark("bench:drag-end"));
    dragMs += Date.now() - t0;
    result.passing_after.push((await rows())?.passing ?? null);
  }
  result.drag_wall_ms = dragMs;
  await cdp.send("Tracing.end");
  await done;
  if (process.env.GPUPLANE_BENCH_TRACE) writeFileSync(`${process.env.GPUPLANE_BENCH_TRACE}.brush.json`, JSON.stringify({ traceEvents: chunks }));
  const found = framesFromTrace(chunks);
  if (found.error) {
    result.error = found.error;
  } else {
    result.frames = found.frames.length;
    result.busy_p95_ms = p95(found.frames.map((f) => f.busy_ms));
    result.cpu_p95_ms = p95(found.frames.map((f) => f.cpu_ms));
    result.busy_max_ms = Math.max(0, ...found.frames.map((f) => f.busy_ms));
    result.busy_mean_ms = found.frames.reduce((n, f) => n + f.busy_ms, 0) / Math.max(1, found.frames.length);
    result.interval_p95_ms = p95(found.frames.map((f) => f.interval_ms));
    result.window_ms = found.window_ms;
  }
  if (process.env.GPUPLANE_BENCH_SHOT) await page.screenshot({ path: process.env.GPUPLANE_BENCH_SHOT, fullPage: true });
  await cdp.detach();
  await page.close();
}

async function follow(result) {
  const page = await context.newPage();
  let requests = 0;
  let streams = 0;
  let tableReads = 0;  // the runs table read again as points arrive (its metric summaries)
  let counting = false;
  page.on("request", (r) => {
    if (r.url().includes("/metrics/stream")) streams++;
    else if (counting && r.url().includes("/metrics")) requests++;
    else if (counting && r.url().includes("/workspace/runs")) tableReads++;
  });
  await page.goto(new URL(path, base).href);
  await page.waitForFunction(() => window.__allDrawnMs !== null, null, { timeout: 60_000, polling: 100 });
  // Each chart's last x (step): a chart that keeps up moves it on (its x count may drop when a
  // live run's overview is read again, so that is not the measure).
  const points = () => page.evaluate(() => [...document.querySelectorAll(".viz-panels .chart-panel")]
    .map((p) => Number(p.dataset.lastX || 0)));
  const cdp = await context.newCDPSession(page);
  await cdp.send("Performance.enable", { timeDomain: "timeTicks" });
  const read = async () => Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
  // GPUPLANE_BENCH_TRACE=FILE: keep a Chrome trace of the window (what the main thread did).
  const traceFile = process.env.GPUPLANE_BENCH_TRACE;
  const chunks = [];
  let traced = null;
  if (traceFile) {
    cdp.on("Tracing.dataCollected", (e) => chunks.push(...e.value));
    traced = new Promise((resolve) => cdp.once("Tracing.tracingComplete", resolve));
    await cdp.send("Tracing.start", {
      traceConfig: { includedCategories: ["devtools.timeline", "disabled-by-default-devtools.timeline",
        "v8.execute", "blink", "cc", "gpu", "toplevel", "__metadata"] },
      transferMode: "ReportEvents",
    });
  }
  counting = true;  // the tail reads in the window
  const before = await read();
  const pointsBefore = await points();
  await new Promise((resolve) => setTimeout(resolve, count * 1000));  // the window: nothing asked of the page
  const after = await read();
  const pointsAfter = await points();
  if (process.env.GPUPLANE_BENCH_SHOT) await page.screenshot({ path: `${process.env.GPUPLANE_BENCH_SHOT}.follow.png` });
  if (traceFile) {
    await cdp.send("Tracing.end");
    await traced;
    writeFileSync(traceFile, JSON.stringify({ traceEvents: chunks }));
  }
  const wall = after.Timestamp - before.Timestamp;
  const share = (name) => (after[name] - before[name]) / wall;
  Object.assign(result, {
    window_s: wall, busy: share("TaskDuration"), cpu: after.ThreadTime === undefined ? null : share("ThreadTime"),
    script: share("ScriptDuration"), layout: share("LayoutDuration"),
    style: share("RecalcStyleDuration"), metrics_requests: requests, stream_requests: streams, table_reads: tableReads,
    charts: pointsAfter.length, steps_before: pointsBefore, steps_after: pointsAfter,
    js_heap_mb: after.JSHeapUsedSize / 1048576,
  });
  await cdp.detach();
  await page.close();
}
