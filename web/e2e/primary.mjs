// A metric's star on a run's metrics tab: clicking its hollow ☆ makes it the primary metric of
// the run's experiment (PUT /api/v1/primary-metric): its star fills, the headline stars it and
// the API resolves it from the experiment; clicking the ★ again unsets it there. On the details
// tab, a ★ per level (experiment, project, global) sets it at that level only, then clears it.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN, GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_RUN_ID   a finished run in an experiment, with no primary metric set anywhere
//   GPUPLANE_UI_METRIC   one of its metrics, to star

import { check, env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

await main("primary", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const runId = env("GPUPLANE_UI_RUN_ID");
  const metric = env("GPUPLANE_UI_METRIC");

  const { watch, page } = await openWatchedPage(result);
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"));
  watch.expect401 = false;
  const experiment = await page.evaluate(async (id) =>
    (await (await fetch(`/api/v1/runs/${id}`)).json()).experiment.id, runId);

  const starSelector = `.chart-panel[data-metric="${metric}"] .star-btn`;
  const seen = async () => ({
    ...await page.evaluate((selector) => {
      const star = document.querySelector(selector);
      return { pressed: star.getAttribute("aria-pressed"), text: star.textContent, title: star.getAttribute("title"),
        headline: [...document.querySelectorAll(".headline .metric-stat > span")].map((s) => s.textContent) };
    }, starSelector),
    api: await page.evaluate(async (id) =>
      (await (await fetch(`/api/v1/primary-metric?experiment=${id}`)).json()).primary_metric, experiment),
  });
  const pressed = (value) => page.waitForFunction(([selector, v]) =>
    document.querySelector(selector)?.getAttribute("aria-pressed") === v, [starSelector, value]);

  result.at = "the metrics tab";
  await page.goto(new URL(`/runs/${runId}?tab=metrics`, base).href);
  await page.locator(starSelector).waitFor();
  result.before = await seen();

  result.at = "starring it";
  await page.locator(starSelector).click();
  await pressed("true");
  await page.waitForFunction((m) => [...document.querySelectorAll(".headline .metric-stat > span")]
    .some((s) => s.textContent === `${m}★`), metric);
  result.set = await seen();
  result.shot = await screenshot(page, "primary-star");

  result.at = "unstarring it";
  await page.locator(starSelector).click();
  await pressed("false");
  result.cleared = await seen();

  // The details tab: a ★ per level sets it exactly there (global, then the project), and clears it.
  result.at = "the details tab";
  await page.goto(new URL(`/runs/${runId}?tab=details`, base).href);
  const levels = page.locator(`[data-primary-levels="${metric}"]`);
  await levels.getByRole("button", { name: "☆ global" }).waitFor();
  result.levels = (await levels.getByRole("button").allTextContents()).map((t) => t.trim());
  const settings = () => page.evaluate(async (id) =>
    (await (await fetch(`/api/v1/primary-metric?experiment=${id}`)).json()).primary_metric.settings, experiment);
  for (const level of ["global", "project"]) {
    await levels.getByRole("button", { name: `☆ ${level}` }).click();
    await levels.getByRole("button", { name: `★ ${level}` }).waitFor();
    result[`set_${level}`] = await settings();
  }
  await screenshot(page, "primary-levels");
  for (const level of ["global", "project"]) {
    await levels.getByRole("button", { name: `★ ${level}` }).click();
    await levels.getByRole("button", { name: `☆ ${level}` }).waitFor();
  }
  result.levels_cleared = await settings();
  delete result.at;

  check(result, result.set.api.metric === metric && result.set.api.source === "experiment",
    `after the click the API resolves ${JSON.stringify(result.set.api)}, not ${metric} from the experiment`);
  check(result, result.cleared.api.settings.experiment === null, "the second click left the experiment's setting");
  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
