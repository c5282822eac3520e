// Signing in: a page needs a session (-> /signin?next=), a wrong token shows the daemon's
// error and stays, the right token lands where the user was going, signing out ends the
// session, and a one-time link from `gpuplanectl ui` signs in once (a second use is refused).
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN, GPUPLANE_UI_LOGIN_URL (a fresh link, --next /runs).

import { check, env, main, openWatchedPage, screenshot } from "./lib.mjs";

await main("signin", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const token = env("GPUPLANE_UI_TOKEN");
  const link = env("GPUPLANE_UI_LOGIN_URL");
  const { browser, watch, page } = await openWatchedPage(result);

  // Not signed in: the app sends the browser to the sign-in page, remembering where it was going.
  await page.goto(new URL("/jobs", base).href);
  await page.waitForURL((u) => u.pathname === "/signin");
  result.redirected_to = new URL(page.url()).pathname + new URL(page.url()).search;
  check(result, result.redirected_to === "/signin?next=%2Fjobs", `expected /signin?next=%2Fjobs, got ${result.redirected_to}`);
  await screenshot(page, "signin-light");

  // A wrong token (the right id, another secret): the daemon's message, and the page stays.
  const wrong = token.slice(0, -4) + (token.endsWith("AAAA") ? "BBBB" : "AAAA");
  await page.getByLabel("API token").fill(wrong);
  await page.getByRole("button", { name: "Sign in" }).click();
  const alert = page.getByRole("alert");
  await alert.waitFor();
  result.wrong_token_error = (await alert.textContent())?.trim();
  check(result, new URL(page.url()).pathname === "/signin", "a wrong token left the sign-in page");
  check(result, await page.getByRole("button", { name: "Sign in" }).isEnabled(), "the sign-in button stayed disabled");
  await screenshot(page, "signin-error-light");

  // The right token: back to /jobs, signed in with its scopes.
  await page.getByLabel("API token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL((u) => u.pathname === "/jobs");
  watch.expect401 = false;
  await page.getByRole("heading", { name: "Jobs", exact: true }).waitFor();
  result.session = (await page.locator(".session-who").textContent())?.trim();
  check(result, result.session === "read · write", `the session box says ${JSON.stringify(result.session)}`);
  const cookies = await browser.context.cookies(base);
  const cookie = cookies.find((c) => c.name === "gpuplane_session");
  result.cookie = cookie ? { httpOnly: cookie.httpOnly, sameSite: cookie.sameSite, path: cookie.path } : null;
  check(result, cookie?.httpOnly === true && cookie?.sameSite === "Strict", `session cookie: ${JSON.stringify(result.cookie)}`);
  check(result, !(await page.evaluate(() => document.cookie)).includes("gpuplane_session"), "the page can read the session cookie");

  // Signing out ends the session: the next page needs a sign-in again.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForURL((u) => u.pathname === "/signin");
  watch.expect401 = true;
  await page.goto(new URL("/runs", base).href);
  await page.waitForURL((u) => u.pathname === "/signin");
  check(result, new URL(page.url()).searchParams.get("next") === "/runs", `after sign-out: ${page.url()}`);

  // The one-time link: signs in and lands on its --next page.
  await browser.context.clearCookies();
  await page.goto(link);
  await page.waitForURL((u) => u.pathname === "/runs");
  watch.expect401 = false;
  await page.getByRole("heading", { name: "Runs", exact: true }).waitFor();
  result.link_session = (await page.locator(".session-who").textContent())?.trim();
  check(result, result.link_session === "read · write", `after the link the session box says ${JSON.stringify(result.link_session)}`);
  result.link_landed = new URL(page.url()).pathname;
  check(result, !page.url().includes("code="), "the login code stayed in the address bar");

  // ... once: the same link again is a 401 page that says so.
  watch.expect401 = true;
  const again = await page.goto(link);
  result.link_reuse_status = again?.status();
  result.link_reuse_title = await page.title();
  check(result, result.link_reuse_status === 401, `a used link answered ${result.link_reuse_status}`);
  check(result, /used or expired/.test(result.link_reuse_title), `a used link's page: ${result.link_reuse_title}`);

  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
