// The queue on the Jobs page and a job's page (issue 33 item 2): a job waiting for another
// shows why it waits, its group and its dependency (a link, with its state), and the other
// shows it as a dependant; the Jobs page pauses and resumes the group, filters to it, and
// changes the waiting job's priority in a dialog (a bad number is refused there, Enter sets it).
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN (read, write), GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_FIRST_ID, GPUPLANE_UI_FIRST_NAME    a running job
//   GPUPLANE_UI_SECOND_ID, GPUPLANE_UI_SECOND_NAME  a job queued after it, in group GPUPLANE_UI_GROUP

import { env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

await main("queue", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const firstId = env("GPUPLANE_UI_FIRST_ID");
  const secondId = env("GPUPLANE_UI_SECOND_ID");
  const secondName = env("GPUPLANE_UI_SECOND_NAME");
  const group = env("GPUPLANE_UI_GROUP");

  const { watch, page } = await openWatchedPage(result);
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"), "/jobs");
  watch.expect401 = false;
  const groupApi = () => page.evaluate(async (g) => (await (await fetch("/api/v1/groups")).json()).groups.find((x) => x.name === g), group);
  const jobApi = (id) => page.evaluate(async (i) => (await (await fetch(`/api/v1/jobs/${i}`)).json()).job, id);

  // The group: its counts, then pause and resume from its chip.
  result.at = "/jobs";
  const chip = page.locator(`.groups-bar [data-group="${group}"]`);
  await chip.waitFor();
  result.group_counts = (await chip.locator("[data-counts]").textContent())?.trim();
  await chip.getByRole("button", { name: `Pause group ${group}` }).click();
  await chip.locator(".badge", { hasText: "paused" }).waitFor();
  result.paused_api = (await groupApi()).paused;
  await screenshot(page, "jobs-group-paused-light");
  await chip.getByRole("button", { name: `Resume group ${group}` }).click();
  await chip.locator(".badge", { hasText: "paused" }).waitFor({ state: "detached" });
  result.resumed_api = (await groupApi()).paused;

  // Only the group's jobs.
  await chip.getByRole("button", { name: group, exact: true }).click();
  await page.waitForURL((u) => u.searchParams.get("group") === group);
  await page.waitForFunction((n) => [...document.querySelectorAll(".jobs-table tbody tr")].length === 1
    && document.querySelector(".jobs-table tbody tr")?.textContent?.includes(n), secondName);
  result.group_rows = await page.locator(".jobs-table tbody tr .strong").allTextContents();

  // Its priority, in a dialog: a bad number is refused there, Enter sets a good one.
  const row = page.locator(".jobs-table tbody tr", { has: page.getByRole("link", { name: secondName, exact: true }) });
  await row.getByRole("button", { name: `Change the priority of ${secondName} (0)` }).click();
  const dialog = page.getByRole("dialog", { name: `Priority of ${secondName}` });
  await dialog.waitFor();
  const input = dialog.getByLabel("Priority (higher runs first)");
  result.prio_focused = await input.evaluate((el) => el === document.activeElement);
  await input.fill("1.5");
  result.prio_error = (await dialog.locator(".field-error").textContent())?.trim();
  result.prio_disabled = await dialog.getByRole("button", { name: "Set priority" }).isDisabled();
  await input.fill("7");
  await input.press("Enter");
  await dialog.waitFor({ state: "detached" });
  await row.getByRole("button", { name: `Change the priority of ${secondName} (7)` }).waitFor();
  result.prio_api = (await jobApi(secondId)).priority;
  result.still_on_jobs = new URL(page.url()).pathname === "/jobs";

  // The waiting job's page: why it waits, its group, its dependency.
  result.at = `/jobs/${secondId}`;
  await page.goto(new URL(`/jobs/${secondId}`, base).href);
  await page.locator("[data-links=dependencies] a").waitFor();
  result.second = {
    wait: (await page.locator("[data-wait-reason]").textContent())?.trim(),
    group: (await page.locator("[data-group]").textContent())?.trim(),
    dependency: { href: await page.locator("[data-links=dependencies] a").getAttribute("href"),
      status: (await page.locator("[data-links=dependencies] .badge").textContent())?.trim() },
    label: (await page.locator(".kv-row", { has: page.locator("[data-links=dependencies]") }).locator("dt").textContent())?.trim(),
  };
  await screenshot(page, "job-dependencies-light");
  // And the first job's page names it as a dependant; its link leads there.
  result.at = `/jobs/${firstId}`;
  await page.goto(new URL(`/jobs/${firstId}`, base).href);
  const dependant = page.locator("[data-links=dependants] a");
  await dependant.waitFor();
  result.first_dependant = { href: await dependant.getAttribute("href"),
    status: (await page.locator("[data-links=dependants] .badge").textContent())?.trim() };
  await dependant.click();
  await page.getByRole("heading", { name: secondName }).waitFor();

  delete result.at;
  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
