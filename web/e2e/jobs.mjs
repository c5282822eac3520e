// A job from the submit dialog: it is queued and the page moves to it, its output streams
// into the log view while it runs (live, from the daemon's own node), Cancel asks first (Keep it changes nothing), then the job
// ends CANCELLED, on its page and in the jobs list.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN, GPUPLANE_UI_SHOTS, GPUPLANE_UI_CWD (the job's
// working directory), GPUPLANE_UI_SUBMIT_NAME (a name no other job has).

import { check, env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

await main("jobs", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const token = env("GPUPLANE_UI_TOKEN");
  const cwd = env("GPUPLANE_UI_CWD");
  const name = env("GPUPLANE_UI_SUBMIT_NAME");

  const { watch, page } = await openWatchedPage(result);
  await signIn(page, base, token, "/jobs");
  watch.expect401 = false;

  // The dialog: a command with quotes (split like a shell would, shown as its arguments).
  await page.getByRole("button", { name: "Submit job" }).click();
  const dialog = page.getByRole("dialog", { name: "Submit a job" });
  await dialog.waitFor();
  await dialog.getByLabel("Command", { exact: true }).fill("sh -c 'i=0; while true; do echo \"tick $i\"; i=$((i+1)); sleep 0.2; done'");
  await dialog.getByLabel("Working directory").fill(cwd);
  await dialog.getByLabel("Name", { exact: true }).fill(name);
  await dialog.getByLabel("GPUs", { exact: true }).fill("0");
  result.argv = await dialog.getByLabel("Arguments").locator("code").allTextContents();
  check(result, result.argv.length === 3 && result.argv[0] === "sh" && result.argv[1] === "-c",
    `the dialog split the command into ${JSON.stringify(result.argv)}`);
  await screenshot(page, "submit-dialog-light");
  await dialog.getByRole("button", { name: "Queue job" }).click();

  // The page of the new job, its output arriving line by line.
  await page.waitForURL((u) => /^\/jobs\/job_/.test(u.pathname));
  result.job_id = new URL(page.url()).pathname.split("/").pop();
  await page.getByRole("heading", { name }).waitFor();
  await page.locator(".page-sub .badge", { hasText: "running" }).waitFor();
  const lines = () => page.evaluate(() => [...document.querySelectorAll(".log-row .log-text")].map((e) => e.textContent));
  await page.waitForFunction(() => document.querySelectorAll(".log-row").length >= 2);
  const first = await lines();
  // Live: more lines come over the stream (the job prints one every 0.2 s), with no reload.
  await page.waitForFunction((n) => document.querySelectorAll(".log-row").length >= n + 3, first.length);
  const later = await lines();
  result.log_lines = { first: first.length, later: later.length, last: later[later.length - 1] };
  check(result, later.every((l, i) => l === `tick ${i}`), `the log view shows ${JSON.stringify(later.slice(0, 8))}…`);
  result.live = (await page.locator(".log-toolbar .live").textContent())?.trim();
  check(result, result.live === "live", `the log's stream state is ${JSON.stringify(result.live)}`);
  // The daemon's own node: the log comes live from it (a remote node's offline link would say "tail only").
  result.log_source = (await page.locator(".log-toolbar [data-log-source]").textContent())?.trim();
  check(result, result.log_source === "live", `the log's source reads ${JSON.stringify(result.log_source)}`);
  await screenshot(page, "job-running-light");

  // Cancel asks first; "Keep it" leaves the job running.
  await page.locator(".page-actions").getByRole("button", { name: `Cancel ${name}` }).click();
  let confirm = page.getByRole("dialog", { name: `Cancel ${name}?` });
  await confirm.waitFor();
  result.confirm_text = (await confirm.locator(".dialog-body").textContent())?.trim();
  check(result, /SIGTERM/.test(result.confirm_text ?? ""), `the confirmation says ${JSON.stringify(result.confirm_text)}`);
  await confirm.getByRole("button", { name: "Keep it" }).click();
  await confirm.waitFor({ state: "detached" });
  check(result, await page.locator(".page-sub .badge", { hasText: "running" }).isVisible(), "Keep it stopped the job");

  await page.locator(".page-actions").getByRole("button", { name: `Cancel ${name}` }).click();
  confirm = page.getByRole("dialog", { name: `Cancel ${name}?` });
  await screenshot(page, "cancel-confirm-light");
  await confirm.getByRole("button", { name: "Cancel job" }).click();
  await confirm.waitFor({ state: "detached" });
  await page.locator(".page-sub .badge", { hasText: "cancelled" }).waitFor({ timeout: 20_000 });
  await page.locator(".log-toolbar .live", { hasText: "ended" }).waitFor();
  result.page_status = "cancelled";
  await screenshot(page, "job-cancelled-light");

  // The list has it too.
  await page.getByRole("link", { name: "Jobs", exact: true }).first().click();
  const row = page.locator("tbody tr", { has: page.getByRole("link", { name, exact: true }) });
  await row.locator(".badge", { hasText: "cancelled" }).waitFor();
  result.list_status = (await row.locator(".badge").first().textContent())?.trim();

  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
