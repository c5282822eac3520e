// Settings > Tokens and Settings > Audit log with an admin session (issue 33 item 2): a token
// with limits shows its scopes, its limits in words and what is left of its GPU-hour budget;
// Revoke asks first ("Keep it" keeps it), then revokes it; the audit log lists that revoke, by a
// browser session, and filtering by a token's name
// (local: the control socket, which made the tokens) shows only its calls.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_ADMIN_TOKEN                          an admin token
//   GPUPLANE_UI_BUDGET_NAME                          a token with limits and a GPU-hour budget

import { env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

await main("settings", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const name = env("GPUPLANE_UI_BUDGET_NAME");

  const { watch, page } = await openWatchedPage(result);
  await signIn(page, base, env("GPUPLANE_UI_ADMIN_TOKEN"), "/settings/tokens");
  watch.expect401 = false;

  result.at = "/settings/tokens";
  const row = page.locator(`.tokens-table tr[data-token="${name}"]`);
  await row.waitFor();
  const cells = async () => (await row.locator("td").allTextContents()).map((t) => t.trim());
  result.row = await cells();
  result.budget = (await row.locator("[data-budget] .sub").textContent())?.trim();
  await screenshot(page, "tokens-light");

  await row.getByRole("button", { name: `Revoke ${name}` }).click();
  const dialog = page.getByRole("dialog", { name: `Revoke ${name}?` });
  await dialog.getByRole("button", { name: "Keep it" }).click();
  await dialog.waitFor({ state: "detached" });
  result.kept = (await row.locator("[data-state]").textContent())?.trim();
  await row.getByRole("button", { name: `Revoke ${name}` }).click();
  await dialog.getByRole("button", { name: "Revoke token" }).click();
  await dialog.waitFor({ state: "detached" });
  await row.locator("[data-state]", { hasText: "revoked" }).waitFor();
  result.revoked = { state: (await row.locator("[data-state]").textContent())?.trim(),
    buttons: await row.getByRole("button", { name: `Revoke ${name}` }).count() };

  result.at = "/settings/audit";
  await page.getByRole("navigation", { name: "Settings" }).getByRole("link", { name: "Audit log" }).click();
  await page.waitForURL((u) => u.pathname === "/settings/audit");
  // The live job's SDK batches are audited too, all along: the revoke is the newest of its kind.
  const revoke = page.locator(".audit-table tbody tr", { hasText: "/revoke" }).first();
  await revoke.waitFor();
  result.revoke = (await revoke.locator("td").allTextContents()).map((t) => t.trim());
  await screenshot(page, "audit-light");
  await page.getByLabel("Only this token's calls").fill("local");
  await page.getByRole("button", { name: "Filter" }).click();
  await page.waitForURL((u) => u.searchParams.get("token") === "local");
  await page.waitForFunction(() => document.querySelectorAll(".audit-table tbody tr").length > 0);
  result.filtered_callers = [...new Set((await page.locator(".audit-table tbody tr td:nth-child(2)").allTextContents()).map((t) => t.trim()))];

  delete result.at;
  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
