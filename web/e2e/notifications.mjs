// Settings > Webhooks with an admin session: add a webhook to the test's loopback receiver,
// see it listed (the secret never shown back), send a test notification, remove it; the Events
// page's rule filter; the live run's Diagnosis tab with its summary and findings.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_ADMIN_TOKEN (an admin token: webhooks need it),
//   GPUPLANE_UI_SHOTS, GPUPLANE_UI_HOOK_URL (the receiver), GPUPLANE_UI_RUN_ID (the live run).

import { check, env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

await main("notifications", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const token = env("GPUPLANE_UI_ADMIN_TOKEN");
  const hookUrl = env("GPUPLANE_UI_HOOK_URL");
  const runId = env("GPUPLANE_UI_RUN_ID");

  const { watch, page } = await openWatchedPage(result);
  await signIn(page, base, token, "/settings/webhooks");
  watch.expect401 = false;

  await page.getByRole("heading", { name: "Webhooks", exact: true }).waitFor();
  await page.getByLabel("URL", { exact: true }).fill(hookUrl);
  await page.getByLabel("Event types (comma-separated, * for all)").fill("job_failed, oom");
  await page.getByLabel("Format").selectOption("slack");
  await page.getByLabel("Secret (signs each body; never shown again)").fill("e2e-secret-123");
  await page.getByRole("button", { name: "Add webhook" }).click();
  // Listed with its path masked (it may hold the hook's secret): scheme://host:port/***.
  const shownUrl = `${new URL(hookUrl).origin}/***`;
  const row = page.locator(".webhooks-table tbody tr").filter({ hasText: shownUrl });
  await row.waitFor();
  result.row = await row.locator("td").allTextContents();
  check(result, !(await page.content()).includes("e2e-secret-123"), "the secret is shown on the page");
  await row.getByRole("button", { name: "Test" }).click();
  result.test = await row.getByRole("status").filter({ hasText: /delivered/ }).textContent();
  await screenshot(page, "webhooks-light");
  check(result, !(await page.content()).includes(hookUrl), "the hook's whole URL is shown on the page");
  // Removing asks first: "Keep it" keeps the row, "Remove webhook" removes it.
  await row.getByRole("button", { name: `Remove ${shownUrl}` }).click();
  const confirm = page.getByRole("dialog", { name: "Remove this webhook?" });
  await confirm.getByRole("button", { name: "Keep it" }).click();
  await confirm.waitFor({ state: "detached" });
  result.kept = await row.isVisible();
  await row.getByRole("button", { name: `Remove ${shownUrl}` }).click();
  await confirm.getByRole("button", { name: "Remove webhook" }).click();
  await page.getByText("No webhooks").waitFor();

  await page.goto(`${base}/events`);
  const rules = page.getByLabel("Filter by rule");
  await rules.waitFor();
  result.rules = await rules.locator("option").allTextContents();
  await rules.selectOption("RUN_STALLED");
  await page.waitForURL((u) => u.searchParams.get("type") === "RUN_STALLED");
  await page.waitForFunction(() => !!document.querySelector(".events-table, .empty"));

  await page.goto(`${base}/runs/${runId}?tab=diagnosis`);
  await page.getByRole("heading", { name: "Diagnosis", exact: true }).waitFor();
  result.summary = await page.locator(".diagnosis-summary").textContent();
  result.findings = await page.locator(".findings > li").count();
  await screenshot(page, "run-diagnosis-light");
});
