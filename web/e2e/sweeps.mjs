// The Sweeps pages (issue 33 item 2) on a sweep the pytest side submitted through the API:
// four trials of lr, at most one at a time, the first logging its loss then holding. The
// list shows its progress and best; its page shows every trial with its value and metric,
// the best combination, then Pause (its queued trials say why they wait), Resume, and Cancel
// through a confirmation driven by keyboard only (Escape keeps the sweep; Enter cancels it).
// A trial's job page links back to the sweep. At 1280x800, the pages fit the window.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN (read, write), GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_SWEEP_ID, GPUPLANE_UI_SWEEP_NAME  the sweep
//   GPUPLANE_UI_TRIAL_JOB                          its trial 0's job

import { check, env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

await main("sweeps", 90_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const sweepId = env("GPUPLANE_UI_SWEEP_ID");
  const name = env("GPUPLANE_UI_SWEEP_NAME");
  const trialJob = env("GPUPLANE_UI_TRIAL_JOB");

  const { watch, page } = await openWatchedPage(result, { viewport: { width: 1280, height: 800 } });
  // At a laptop's width neither the page nor its table scrolls sideways.
  const fits = (table) => page.evaluate((sel) => {
    const doc = document.scrollingElement;
    const wrap = document.querySelector(sel)?.closest(".table-wrap");
    return doc.scrollWidth <= doc.clientWidth && !!wrap && wrap.scrollWidth <= wrap.clientWidth;
  }, table);
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"), "/jobs");
  watch.expect401 = false;

  // The list, reached from the nav: progress and the best so far (trial 0 logged its loss).
  result.at = "/sweeps";
  await page.getByRole("navigation", { name: "Pages" }).getByRole("link", { name: "Sweeps" }).click();
  const row = page.locator(`.sweeps-table tr[data-sweep="${name}"]`);
  await row.locator("[data-best] b").waitFor({ timeout: 30_000 });
  result.list = {
    status: (await row.locator(".badge").first().textContent())?.trim(),
    progress: (await row.locator("[data-progress]").textContent())?.trim(),
    best: (await row.locator("[data-best]").textContent())?.trim(),
  };
  check(result, await fits(".sweeps-table"), "the sweeps list does not fit 1280 px");
  await screenshot(page, "sweeps-light");

  // Its page: the trials with their values, the best combination.
  result.at = `/sweeps/${sweepId}`;
  await row.getByRole("link", { name, exact: true }).click();
  await page.waitForURL((u) => u.pathname === `/sweeps/${sweepId}`);
  await page.waitForFunction(() => document.querySelectorAll(".trials-table tbody tr").length >= 4);
  await page.locator("[data-best] .kv").waitFor();
  const table = page.locator(".trials-table");
  result.headers = (await table.locator("thead th").allTextContents()).map((t) => t.trim());
  result.trials = await table.locator("tbody tr").evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll("td")]
    .map((td) => td.textContent.trim())));
  result.best_card = (await page.locator("[data-best]").textContent())?.trim();
  check(result, await fits(".trials-table"), "the sweep's page does not fit 1280 px");
  await screenshot(page, "sweep-light");

  // Pause: the queued trials wait for it, and Resume takes its place.
  const actions = page.locator(".page-actions");
  await actions.getByRole("button", { name: "Pause" }).click();
  await actions.getByRole("button", { name: "Resume" }).waitFor();
  await page.locator(".page-sub .badge", { hasText: "paused" }).waitFor();
  await table.locator("tbody tr td", { hasText: "paused" }).first().waitFor();
  result.paused = {
    status: (await page.locator(".page-sub .badge").first().textContent())?.trim(),
    reason: (await page.locator("[data-pause-reason]").textContent())?.trim(),
    note: (await table.locator("tbody tr td", { hasText: "paused" }).first().textContent())?.trim(),
  };
  await screenshot(page, "sweep-paused-light");
  await actions.getByRole("button", { name: "Resume" }).click();
  await actions.getByRole("button", { name: "Pause" }).waitFor();
  await page.waitForFunction(() => !document.querySelector(".page-sub .badge")?.textContent?.includes("paused"));
  result.resumed = (await page.locator(".page-sub .badge").first().textContent())?.trim();

  // Cancel, by keyboard: the dialog opens on its action; Escape keeps the sweep and gives the
  // focus back; Tab goes round the dialog's buttons; Enter on "Cancel sweep" cancels it.
  const cancel = actions.getByRole("button", { name: "Cancel sweep" });
  await cancel.focus();
  await page.keyboard.press("Enter");
  let dialog = page.getByRole("dialog", { name: `Cancel sweep ${name}?` });
  await dialog.waitFor();
  const focused = () => page.evaluate(() => {
    const el = document.activeElement;
    return { text: el?.textContent?.trim() || el?.getAttribute("aria-label"), inDialog: !!el?.closest("[role=dialog]") };
  });
  result.dialog_focus = await focused();
  await page.keyboard.press("Escape");
  await dialog.waitFor({ state: "detached" });
  result.after_escape = { focus: await focused(), status: (await page.locator(".page-sub .badge").first().textContent())?.trim() };
  await page.keyboard.press("Enter");
  dialog = page.getByRole("dialog", { name: `Cancel sweep ${name}?` });
  await dialog.waitFor();
  const round = [];
  for (let i = 0; i < 3; i++) {
    await page.keyboard.press("Tab");
    round.push(await focused());
  }
  result.tab_round = round;
  await screenshot(page, "sweep-cancel-confirm-light");
  await page.keyboard.press("Enter"); // three Tabs from "Cancel sweep" come back to it
  await dialog.waitFor({ state: "detached" });
  await page.locator(".page-sub .badge", { hasText: "cancelled" }).waitFor({ timeout: 20_000 });
  result.cancelled = (await page.locator(".page-sub .badge").first().textContent())?.trim();
  result.actions_after = (await actions.locator("button").allTextContents()).map((t) => t.trim());

  // A trial's job page links to its sweep.
  result.at = `/jobs/${trialJob}`;
  await page.goto(new URL(`/jobs/${trialJob}`, base).href);
  const link = page.locator("[data-sweep-link] a");
  await link.waitFor();
  result.trial_link = { text: (await link.textContent())?.trim(), href: await link.getAttribute("href") };
  await link.click();
  await page.waitForURL((u) => u.pathname === `/sweeps/${sweepId}`);

  delete result.at;
  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
