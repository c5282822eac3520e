// The quality bar (issue 33 item 5): every page, light and dark, at 1280x800 and 390x844, in
// one browser session. On each: no console error and no failed request, the page does not
// scroll sideways (a wide table may scroll inside its own box), and axe-core (wcag2a and
// wcag2aa rules) finds nothing serious or critical; a screenshot of each. In the light theme at
// each size, the keyboard: a table's rows are reached with Tab and opened with Enter, and a
// dialog takes the focus, keeps Tab inside, closes on Escape and gives the focus back.
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN (an admin token: the settings pages), GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_RUN_ID  a run whose job is still logging (GPUPLANE_UI_JOB_ID: that job)
//   GPUPLANE_UI_RUN2_ID a finished run, for Compare
//   GPUPLANE_UI_SWEEP_ID a sweep; GPUPLANE_UI_EXPERIMENT_ID the live run's experiment

import { createRequire } from "node:module";
import { check, env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

const AXE = createRequire(import.meta.url).resolve("axe-core/axe.min.js");
const SIZES = [{ name: "1280", width: 1280, height: 800 }, { name: "390", width: 390, height: 844 }];
const THEMES = ["light", "dark"];
const SERIOUS = new Set(["serious", "critical"]);
const NOT_BUSY = () => document.querySelectorAll('[aria-busy="true"], .chart-skeleton').length === 0;

function pages({ runId, run2Id, jobId, sweepId, experimentId, viewId, viewState }) {
  const run = (tab) => ({ name: `run-${tab}`, path: `/runs/${runId}?tab=${tab}`, ready: ".tabs-bar" });
  return [
    { name: "dashboard", path: "/", ready: ".gpu-grid tbody tr" },
    { name: "jobs", path: "/jobs", ready: "table tbody tr a", rowOpens: /^\/jobs\/[^/]+$/,
      dialog: { opener: { role: "button", name: "Submit job" } } },
    { name: "job", path: `/jobs/${jobId}`, ready: ".log-row",
      dialog: { opener: { role: "button", name: /^Cancel / } } },
    { name: "runs", path: "/runs", ready: ".runs-table tbody tr a", rowOpens: /^\/runs\/[^/]+$/ },
    { ...run("metrics"), ready: ".chart-panel canvas" },
    run("diagnosis"), run("system"), run("events"), run("checkpoints"), run("details"),
    { name: "compare", path: `/compare?runs=${runId},${run2Id}`, ready: ".chart-panel canvas" },
    { name: "events", path: "/events", ready: ".events-table tbody tr, .empty" },
    { name: "nodes", path: "/nodes", ready: ".system-panel canvas" },
    { name: "checkpoints-evaluations", path: `/evaluations?experiment=${experimentId}`, ready: "h1" },
    { name: "sweeps", path: "/sweeps", ready: "table tbody tr a", rowOpens: /^\/sweeps\/[^/]+$/ },
    { name: "sweep", path: `/sweeps/${sweepId}`, ready: "table tbody tr" },
    { name: "experiments", path: `/experiments?sweep=${sweepId}`, ready: ".exp-table tbody tr[data-run]", rowOpens: /^\/runs\/[^/]+$/,
      popovers: ["Add project", "Filter", "Columns", "Saved views"] },
    // A short link: it loads the kept view and shows the full state in the address.
    { name: "short-link", path: `/v/${viewId}`, ready: ".exp-table tbody tr[data-run]", address: `/experiments?${viewState}` },
    { name: "webhooks", path: "/settings/webhooks", ready: "h1" },
    { name: "tokens", path: "/settings/tokens", ready: "table tbody tr",
      dialog: { opener: { role: "button", name: /^Revoke / } } },
    { name: "audit", path: "/settings/audit", ready: "table tbody tr" },
    { name: "signin", path: "/signin", ready: "#root input" },
    { name: "not-found", path: "/no-such-page", ready: ".empty" },
  ];
}

/** What axe-core finds serious or critical on the page, one line a rule. */
async function axeViolations(page) {
  await page.addScriptTag({ path: AXE });
  const found = await page.evaluate(async () => {
    const r = await window.axe.run(document, { runOnly: { type: "tag", values: ["wcag2a", "wcag2aa"] },
      resultTypes: ["violations"] });
    return r.violations.map((v) => ({ id: v.id, impact: v.impact, help: v.help,
      nodes: v.nodes.slice(0, 3).map((n) => `${n.target.join(" ")}${n.failureSummary ? ` (${n.failureSummary.split("\n").slice(1, 2).join("").trim()})` : ""}`),
      count: v.nodes.length }));
  });
  return found.filter((v) => SERIOUS.has(v.impact));
}

/** Tab from the top of the page until the focus is on a link in a table row; Enter there opens it. */
async function tableByKeyboard(page, p, result, where) {
  await page.evaluate(() => { document.activeElement?.blur(); window.scrollTo(0, 0); });
  let inRow = false;
  for (let i = 0; i < 120 && !inRow; i++) {
    await page.keyboard.press("Tab");
    inRow = await page.evaluate(() => !!document.activeElement?.matches("table tbody tr a[href]"));
  }
  if (!check(result, inRow, `${where}: Tab never reaches a row of the table`)) return { reached: false };
  const label = await page.evaluate(() => document.activeElement.textContent.trim());
  await page.keyboard.press("Enter");
  await page.waitForURL((u) => p.rowOpens.test(u.pathname), { timeout: 5000 }).catch(() => undefined);
  const landed = new URL(page.url()).pathname;
  check(result, p.rowOpens.test(landed), `${where}: Enter on the row's "${label}" went to ${landed}`);
  return { reached: true, label, landed };
}

/** Each named button's popover, opened by keyboard, must not make the page scroll sideways; Escape closes it
 * and gives the focus back to its button. */
async function popoversStayOnScreen(page, p, result, where) {
  const out = {};
  for (const name of p.popovers) {
    const button = page.getByRole("button", { name: new RegExp(`^${name}`) }).first();
    await button.focus();
    await page.keyboard.press("Enter");
    await page.locator(".popover").first().waitFor();
    const { scrollWidth, clientWidth } = await page.evaluate(() => ({ scrollWidth: document.scrollingElement.scrollWidth,
      clientWidth: document.scrollingElement.clientWidth }));
    check(result, scrollWidth <= clientWidth, `${where}: the "${name}" popover makes the page scroll sideways (${scrollWidth} > ${clientWidth})`);
    await page.keyboard.press("Escape");
    await page.locator(".popover").waitFor({ state: "detached", timeout: 5000 }).catch(() => undefined);
    const closed = await page.locator(".popover").count() === 0;
    check(result, closed, `${where}: Escape did not close the "${name}" popover`);
    const back = await page.evaluate(() => document.activeElement?.textContent.trim() ?? "");
    check(result, back.startsWith(name), `${where}: after Escape the focus is on "${back}", not on "${name}"`);
    out[name] = { overflow: scrollWidth - clientWidth, closed, focus_back: back.startsWith(name) };
  }
  return out;
}

/** The dialog's opener by keyboard: focus in, Tab round inside, Escape out, focus back. */
async function dialogByKeyboard(page, p, result, where) {
  const opener = page.getByRole(p.dialog.opener.role, { name: p.dialog.opener.name }).first();
  await opener.focus();
  const openerText = await opener.evaluate((e) => e.getAttribute("aria-label") || e.textContent.trim());
  await page.keyboard.press("Enter");
  await page.locator('[role="dialog"]').waitFor();
  const inDialog = () => page.evaluate(() => !!document.activeElement?.closest('[role="dialog"]'));
  const focusIn = await inDialog();
  check(result, focusIn, `${where}: the dialog of "${openerText}" did not take the focus`);
  let stayed = true;
  for (let i = 0; i < 12; i++) {
    await page.keyboard.press("Tab");
    stayed &&= await inDialog();
  }
  await page.keyboard.press("Shift+Tab");
  stayed &&= await inDialog();
  check(result, stayed, `${where}: Tab left the dialog of "${openerText}"`);
  await page.keyboard.press("Escape");
  await page.locator('[role="dialog"]').waitFor({ state: "detached", timeout: 5000 }).catch(() => undefined);
  const closed = await page.locator('[role="dialog"]').count() === 0;
  check(result, closed, `${where}: Escape did not close the dialog of "${openerText}"`);
  const back = await page.evaluate(() => document.activeElement?.getAttribute("aria-label") || document.activeElement?.textContent.trim());
  check(result, back === openerText, `${where}: after Escape the focus is on "${back}", not on "${openerText}"`);
  return { opener: openerText, focus_in: focusIn, stayed, closed, focus_back: back === openerText };
}

await main("quality", 280_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const ids = { runId: env("GPUPLANE_UI_RUN_ID"), run2Id: env("GPUPLANE_UI_RUN2_ID"), jobId: env("GPUPLANE_UI_JOB_ID"),
    sweepId: env("GPUPLANE_UI_SWEEP_ID"), experimentId: env("GPUPLANE_UI_EXPERIMENT_ID") };
  const { watch, page } = await openWatchedPage(result, { viewport: SIZES[0] });
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"), "/jobs");
  watch.expect401 = false;
  ids.viewState = `sweep=${ids.sweepId}&sort=-m.loss&diff=1`;
  ids.viewId = await page.evaluate(async (state) => {
    const r = await fetch("/api/v1/views", { method: "POST", body: JSON.stringify({ state, page: "experiments" }),
      headers: { "Content-Type": "application/json", "X-GPUPlane-CSRF": "1" } });
    return (await r.json()).view.id;
  }, ids.viewState);

  result.pages = [];
  result.keyboard = [];
  for (const size of SIZES) {
    await page.setViewportSize({ width: size.width, height: size.height });
    for (const theme of THEMES) {
      await page.evaluate((t) => localStorage.setItem("gpuplane.theme", t), theme);
      for (const p of pages(ids)) {
        const where = `${p.path} (${theme}, ${size.name})`;
        result.at = where;
        const before = watch.problems.length;
        const t0 = performance.now();
        await page.goto(new URL(p.path, base).href);
        await page.locator(p.ready).first().waitFor();
        await page.waitForFunction(NOT_BUSY);
        if (p.address) {
          const at = new URL(page.url());
          check(result, at.pathname + at.search === p.address, `${where}: the address is ${at.pathname}${at.search}, not ${p.address}`);
        }
        await page.evaluate(() => document.fonts.ready);
        const shown = await page.evaluate(() => ({ theme: document.documentElement.dataset.theme,
          scrollWidth: document.scrollingElement.scrollWidth, clientWidth: document.scrollingElement.clientWidth,
          // A shown, named column squeezed to nothing (a fixed-layout table narrower than its columns).
          squeezed: [...document.querySelectorAll("table thead th")].filter((th) => th.textContent.trim() &&
            getComputedStyle(th).display !== "none" && th.getBoundingClientRect().width < 24).map((th) => th.textContent.trim()) }));
        check(result, shown.theme === theme, `${where}: the theme is ${shown.theme}`);
        check(result, shown.scrollWidth <= shown.clientWidth,
          `${where}: the page scrolls sideways (${shown.scrollWidth} > ${shown.clientWidth})`);
        check(result, shown.squeezed.length === 0, `${where}: columns squeezed to nothing: ${shown.squeezed.join(", ")}`);
        const t1 = performance.now();
        const serious = await axeViolations(page);
        const t2 = performance.now();
        for (const v of serious) result.failures.push(`${where}: axe ${v.impact} ${v.id} (${v.help}) on ${v.count}: ${v.nodes.join("; ")}`);
        const shot = await screenshot(page, `quality-${p.name}-${theme}-${size.name}`);
        const entry = { name: p.name, theme, size: size.name, ms: Math.round(performance.now() - t0),
          ready_ms: Math.round(t1 - t0), axe_ms: Math.round(t2 - t1), overflow:
          shown.scrollWidth - shown.clientWidth, squeezed: shown.squeezed, axe: serious.map((v) => v.id), shot, problems: watch.problems.slice(before) };
        result.pages.push(entry);
        if (theme !== "light") continue;
        if (p.popovers) result.keyboard.push({ page: p.name, size: size.name, popovers: await popoversStayOnScreen(page, p, result, where) });
        if (p.dialog) result.keyboard.push({ page: p.name, size: size.name, dialog: await dialogByKeyboard(page, p, result, where) });
        if (p.rowOpens) result.keyboard.push({ page: p.name, size: size.name, table: await tableByKeyboard(page, p, result, where) });
      }
    }
  }
  delete result.at;
  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
