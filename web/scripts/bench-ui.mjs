// The browser side of bench/ui_bench.py: Debian's chromium (playwright-core, a fresh
// profile, headless) signed in to a daemon's HTTP front. Prints one JSON line.
//
//   node scripts/bench-ui.mjs open URL RUN_ID LOADS
//     Opens /runs/RUN_ID LOADS times, each in a new tab (the first with an empty cache, the
//     rest with the app's files cached, as a user coming back), and reports per load the ms
//     from navigation start to the first and to the last chart panel drawn with its points
//     (the page's performance marks "gpuplane:chart-drawn:<metric>").
//   node scripts/bench-ui.mjs follow URL RUN_ID SECONDS
//     Opens /runs/RUN_ID (a run still logging), waits until its charts are drawn, then over
//     SECONDS reads the Chrome DevTools Protocol's Performance.getMetrics before and after:
//     the main thread's busy time (TaskDuration) and its parts (ScriptDuration, LayoutDuration,
//     RecalcStyleDuration), as a share of the wall time; and how far the charts moved on.
// Env: GPUPLANE_TOKEN (signs in on /signin first), GPUPLANE_CHROMIUM (default /usr/bin/chromium).

import { chromium } from "playwright-core";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const [mode, base, runId, countArg] = process.argv.slice(2);
if (!["open", "follow"].includes(mode) || !base || !runId) {
  console.error("usage: node scripts/bench-ui.mjs open|follow URL RUN_ID LOADS|SECONDS");
  process.exit(2);
}
const count = Number(countArg ?? (mode === "open" ? 5 : 20));
const ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];

const profile = mkdtempSync(join(tmpdir(), "gpuplane-bench-profile-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: process.env.GPUPLANE_CHROMIUM || "/usr/bin/chromium", headless: true, args: ARGS,
  viewport: { width: 1400, height: 900 },
});
const out = { mode, run_id: runId };
try {
  if (process.env.GPUPLANE_TOKEN) {
    const page = context.pages()[0] ?? await context.newPage();
    await page.goto(new URL("/signin", base).href);
    await page.getByLabel("API token").fill(process.env.GPUPLANE_TOKEN);
    await page.getByRole("button", { name: "Sign in" }).click();
    await page.waitForURL((u) => u.pathname !== "/signin");
    if (mode === "open") {
      // An empty cache for the first load: the sign-in page fetched the app's files.
      const cdp = await context.newCDPSession(page);
      await cdp.send("Network.clearBrowserCache");
      await cdp.detach();
    }
    await page.close();
  }
  if (mode === "open") await open(out);
  else await follow(out);
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
process.stdout.write(`${JSON.stringify(out)}\n`);

/** Every chart panel on the page has drawn its points. */
function allDrawn() {
  const panels = document.querySelectorAll(".chart-panel").length;
  const drawn = performance.getEntriesByType("mark").filter((m) => m.name.startsWith("gpuplane:chart-drawn:")).length;
  return panels > 0 && drawn >= panels;
}

async function open(result) {
  result.loads = [];
  for (let i = 0; i < count; i++) {
    const page = await context.newPage();
    await page.goto(new URL(`/runs/${runId}`, base).href);
    await page.waitForFunction(allDrawn, null, { timeout: 30_000 });
    result.loads.push(await page.evaluate(() => {
      const marks = performance.getEntriesByType("mark").filter((m) => m.name.startsWith("gpuplane:chart-drawn:"))
        .map((m) => m.startTime);
      const nav = performance.getEntriesByType("navigation")[0];
      const metrics = performance.getEntriesByType("resource").filter((r) => r.name.includes("/metrics"));
      return {
        charts: document.querySelectorAll(".chart-panel").length,
        first_chart_ms: Math.min(...marks),
        last_chart_ms: Math.max(...marks),
        dom_content_loaded_ms: nav?.domContentLoadedEventEnd ?? null,
        metrics_request: metrics.length ? { start_ms: metrics[0].startTime, end_ms: metrics[0].responseEnd,
          bytes: metrics[0].encodedBodySize } : null,
        points: Math.max(...[...document.querySelectorAll(".chart-panel")].map((p) => Number(p.dataset.points ?? 0))),
      };
    }));
    await page.close();
  }
}

async function follow(result) {
  const page = await context.newPage();
  await page.goto(new URL(`/runs/${runId}`, base).href);
  await page.waitForFunction(allDrawn, null, { timeout: 30_000 });
  const steps = () => page.evaluate(() => [...document.querySelectorAll(".chart-panel")].map((p) =>
    Number((/step ([\d,]+)/.exec(p.querySelector(".readout-x")?.textContent ?? "")?.[1] ?? "0").replaceAll(",", ""))));
  const cdp = await context.newCDPSession(page);
  await cdp.send("Performance.enable", { timeDomain: "timeTicks" });
  const read = async () => Object.fromEntries((await cdp.send("Performance.getMetrics")).metrics.map((m) => [m.name, m.value]));
  let requests = 0;
  page.on("request", (r) => { if (r.url().includes("/metrics")) requests++; });
  const before = await read();
  const stepsBefore = await steps();
  // The measuring window: nothing is asked of the page meanwhile.
  await new Promise((resolve) => setTimeout(resolve, count * 1000));
  const after = await read();
  const stepsAfter = await steps();
  const wall = after.Timestamp - before.Timestamp;
  const share = (name) => (after[name] - before[name]) / wall;
  result.window_s = wall;
  result.busy = share("TaskDuration");
  result.script = share("ScriptDuration");
  result.layout = share("LayoutDuration");
  result.style = share("RecalcStyleDuration");
  result.metrics_requests = requests;
  result.charts = stepsAfter.length;
  result.steps_before = stepsBefore;
  result.steps_after = stepsAfter;
  result.js_heap_mb = after.JSHeapUsedSize / 1048576;
  result.nodes = after.Nodes;
  await cdp.detach();
  await page.close();
}
