// How long a page takes to draw its charts, in a real browser (Debian chromium driven by
// playwright-core; no browser download). Usage:
//   node scripts/measure-open.mjs http://127.0.0.1:5173/runs/<run_id> [runs]
// Prints, per load, the ms from navigation start to the last chart panel with points drawn.
// Against a daemon's own HTTP front, set GPUPLANE_TOKEN: the script signs in on /signin first
// (the session cookie then rides along; the token never goes into a URL).

import { chromium } from "playwright-core";
import { execSync } from "node:child_process";

const url = process.argv[2];
const runs = Number(process.argv[3] ?? 3);
if (!url) {
  console.error("usage: node scripts/measure-open.mjs URL [runs]");
  process.exit(2);
}
const executablePath = execSync("command -v chromium || command -v chromium-browser", { shell: "/bin/sh" }).toString().trim();
const browser = await chromium.launch({ executablePath, args: ["--no-sandbox", "--disable-gpu", "--disable-quic"] });
const context = await browser.newContext({ viewport: { width: 1400, height: 900 } });
if (process.env.GPUPLANE_TOKEN) {
  const page = await context.newPage();
  await page.goto(new URL("/signin", url).href);
  await page.fill("input[type=password]", process.env.GPUPLANE_TOKEN);
  await page.click("button[class*=btn-primary]");
  await page.waitForURL((u) => !u.pathname.startsWith("/signin"));
  await page.close();
}
const times = [];
try {
  for (let i = 0; i < runs; i++) {
    const page = await context.newPage();
    await page.goto(url);
    await page.waitForFunction(() => {
      const panels = document.querySelectorAll(".chart-panel").length;
      const drawn = performance.getEntriesByType("mark").filter((m) => m.name.startsWith("gpuplane:chart-drawn:")).length;
      return panels > 0 && drawn >= panels;
    }, null, { timeout: 15_000 });
    const ms = await page.evaluate(() => Math.max(...performance.getEntriesByType("mark")
      .filter((m) => m.name.startsWith("gpuplane:chart-drawn:")).map((m) => m.startTime)));
    const panels = await page.evaluate(() => document.querySelectorAll(".chart-panel").length);
    times.push(ms);
    console.log(`load ${i + 1}: ${panels} charts drawn ${ms.toFixed(0)} ms after navigation start`);
    await page.close();
  }
} finally {
  await browser.close();
}
times.sort((a, b) => a - b);
console.log(`median ${times[Math.floor(times.length / 2)].toFixed(0)} ms`);
