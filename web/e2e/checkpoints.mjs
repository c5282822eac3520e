// A run's checkpoints tab and its experiment's evaluations, light and dark: the tab lists
// each checkpoint (step, path, size, fingerprint, the ranking metric) with the best marked,
// the header names where the run's metrics came from, and the Evaluations page shows the
// experiment's evaluations (or says there are none, or that the daemon has no such list).
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN, GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_RUN_ID         a run with checkpoints (an imported one)
//   GPUPLANE_UI_EXPERIMENT_ID  its experiment
//   GPUPLANE_UI_EVALS          what its evaluations list is: "missing" (no endpoint), "none" or a count

import { check, env, main, openWatchedPage, screenshot, setTheme, signIn } from "./lib.mjs";

const NOT_BUSY = () => document.querySelectorAll('[aria-busy="true"]').length === 0;

await main("checkpoints", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const runId = env("GPUPLANE_UI_RUN_ID");
  const experimentId = env("GPUPLANE_UI_EXPERIMENT_ID");
  const evals = env("GPUPLANE_UI_EVALS");

  const { watch, page } = await openWatchedPage(result);
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"));
  watch.expect401 = false;

  result.shots = [];
  for (const theme of ["light", "dark"]) {
    await setTheme(page, theme);
    result.at = `checkpoints tab (${theme})`;
    await page.goto(new URL(`/runs/${runId}?tab=checkpoints`, base).href);
    await page.waitForFunction(() => document.querySelectorAll(".checkpoints-table tbody tr").length > 0);
    await page.waitForFunction(NOT_BUSY);
    const tab = await page.evaluate(() => ({
      headers: [...document.querySelectorAll(".checkpoints-table thead th")].map((th) => th.textContent),
      rows: [...document.querySelectorAll(".checkpoints-table tbody tr")].map((tr) => ({
        id: tr.getAttribute("data-checkpoint"),
        best: !!tr.querySelector(".badge.best") && tr.classList.contains("best-row"),
        cells: [...tr.querySelectorAll("td")].map((td) => td.textContent),
      })),
      note: document.querySelector(".tab-note")?.textContent ?? "",
      source: document.querySelector(".metric-source")?.textContent ?? null,
      details: null,
    }));
    result.shots.push(await screenshot(page, `checkpoints-${theme}`));
    if (theme === "light") {
      await page.getByRole("tab", { name: "Details" }).click();
      await page.waitForFunction(() => !!document.querySelector(".details-grid .kv-row"));
      tab.details = await page.evaluate(() => Object.fromEntries([...document.querySelectorAll(".details-grid .kv-row")]
        .map((row) => [row.querySelector("dt")?.textContent, row.querySelector("dd")?.textContent])));
      result.tab = tab;
    }

    result.at = `evaluations (${theme})`;
    await page.goto(new URL(`/evaluations?experiment=${encodeURIComponent(experimentId)}`, base).href);
    const shown = await page.waitForFunction(() => {
      if (document.querySelector(".evaluations-table")) return `${document.querySelectorAll(".evaluations-table tbody tr").length}`;
      const title = document.querySelector(".empty .empty-title")?.textContent ?? "";
      if (/not listed by this daemon/.test(title)) return "missing";
      if (/No evaluations/.test(title)) return "none";
      return false;
    });
    const state = await shown.jsonValue();
    await page.waitForFunction(() => {
      const picked = document.querySelector('select[aria-label="Experiment"]');
      return picked && picked.value !== "";
    });
    result.evaluations = { state, experiment: await page.locator('select[aria-label="Experiment"]').inputValue(),
      project: await page.locator('select[aria-label="Project"]').inputValue(),
      ...await page.evaluate(() => ({
        headers: [...document.querySelectorAll(".evaluations-table thead th")].map((th) => th.textContent),
        first: [...(document.querySelector(".evaluations-table tbody tr")?.querySelectorAll("td") ?? [])].map((td) => td.textContent),
      })) };
    check(result, state === evals, `evaluations page (${theme}) shows ${state}, the API says ${evals}`);
    result.shots.push(await screenshot(page, `evaluations-${theme}`));
  }
  delete result.at;
  // The one 404 the page asks for knowingly: a daemon without the experiment's evaluations list.
  const missing = new RegExp(`HTTP 404: GET .*/api/v1/experiments/${experimentId}/evaluations`);
  result.problems = watch.problems.filter((p) => !(evals === "missing" && missing.test(p)));
  for (const p of result.problems) result.failures.push(p);
});
