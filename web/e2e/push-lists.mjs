// The list pages follow GET /changes/stream (issue 33 item 3): with nothing changing, the Runs
// and Jobs pages ask for their lists once and then never on a timer (they polled every 5 s and
// 3 s before); one changes stream serves both pages (kept across the in-app move); a job
// submitted through the API makes the Jobs page ask again at once, and the job appears there
// without a reload.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN, GPUPLANE_UI_SHOTS, GPUPLANE_UI_CWD (the job's working
//   directory), GPUPLANE_UI_SUBMIT_NAME (a name no other job has).

import { check, env, main, openWatchedPage, screenshot, signIn, until } from "./lib.mjs";

const RUNS_QUIET_MS = 6000; // longer than the 5 s the Runs page polled at
const JOBS_QUIET_MS = 4000; // longer than the 3 s the Jobs page polled at
const CHANGES = /^\/api\/v1\/changes\/stream$/;
const LISTS = /^\/api\/v1\/(jobs|runs|groups)$/;

await main("push-lists", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const token = env("GPUPLANE_UI_TOKEN");
  const name = env("GPUPLANE_UI_SUBMIT_NAME");
  const { browser, watch, page } = await openWatchedPage(result);

  const asked = []; // [ms, path] of every list and changes-stream request
  browser.context.on("request", (r) => {
    const path = new URL(r.url()).pathname;
    if (r.method() === "GET" && (LISTS.test(path) || CHANGES.test(path))) asked.push([performance.now(), path]);
  });
  const since = (t, pattern) => asked.filter(([at, p]) => at >= t && pattern.test(p)).map(([, p]) => p);
  const streamOpen = page.waitForResponse((r) => CHANGES.test(new URL(r.url()).pathname) && r.status() === 200,
    { timeout: 20_000 });
  const t0 = performance.now();
  await signIn(page, base, token, "/runs");
  watch.expect401 = false;
  await streamOpen;

  result.at = "the Runs page";
  await page.locator(".page").first().waitFor();
  // The page's first fetch, then the one the stream's `ready` asks for (what changed before it opened).
  await until(() => since(t0, /^\/api\/v1\/runs$/).length >= 2, 10_000);
  await page.waitForTimeout(300);
  let t = performance.now();
  await page.waitForTimeout(RUNS_QUIET_MS);
  result.runs_quiet = since(t, LISTS);
  check(result, result.runs_quiet.length === 0, `the Runs page asked on a timer with the stream up: ${result.runs_quiet}`);

  result.at = "the Jobs page";
  await page.locator(`nav a[href="/jobs"]`).first().click();
  await page.waitForURL((u) => u.pathname === "/jobs");
  await until(() => since(t, /^\/api\/v1\/jobs$/).length >= 1, 5000);
  await page.waitForTimeout(500);
  t = performance.now();
  await page.waitForTimeout(JOBS_QUIET_MS);
  result.jobs_quiet = since(t, LISTS);
  check(result, result.jobs_quiet.length === 0, `the Jobs page asked on a timer with the stream up: ${result.jobs_quiet}`);
  result.streams = since(t0, CHANGES).length;
  check(result, result.streams === 1, `${result.streams} changes streams were opened for two pages, not one`);

  result.at = "a job submitted through the API";
  t = performance.now();
  const reply = await fetch(new URL("/api/v1/jobs", base), {
    method: "POST", headers: { Authorization: `Bearer ${token}`, "Content-Type": "application/json" },
    body: JSON.stringify({ command: ["sleep", "30"], cwd: env("GPUPLANE_UI_CWD"), name, gpu: 0 }),
  });
  check(result, reply.ok, `POST /jobs answered ${reply.status}`);
  await page.getByRole("link", { name, exact: true }).first().waitFor({ timeout: 5000 });
  result.shown_ms = Math.round(performance.now() - t);
  result.asked_after_submit = since(t, /^\/api\/v1\/jobs$/).length;
  check(result, result.asked_after_submit >= 1, "the Jobs page did not ask for its list after the submit");
  check(result, since(t0, CHANGES).length === 1, "the changes stream was opened again");
  await screenshot(page, "push-jobs-list");

  delete result.at;
  for (const p of watch.problems) result.failures.push(p);
});
