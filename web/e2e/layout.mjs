// Layout at a laptop's width (issue 33 item 4): at 1280x800 each page named in
// GPUPLANE_UI_LAYOUT fits the window. The page does not scroll sideways, its table does not
// either (the table's own box, which would hide its last columns behind a scrollbar), every
// cell of the last column lies inside the viewport, and the texts named in `unclipped` show
// whole (no ellipsis, no overflow of their box).
// Env: GPUPLANE_UI_URL, GPUPLANE_UI_TOKEN, GPUPLANE_UI_SHOTS, and
//   GPUPLANE_UI_LAYOUT  a JSON list of {name, path, table?: css selector, rows?: least rows,
//                       unclipped?: css selector, text?: a text the page shows once loaded,
//                       days_later?: the browser's clock that many days on (dates then show in
//                       full: "Dec 6, 10:27:07" where today's show the time only); the
//                       pages with days_later come last}

import { check, env, main, openWatchedPage, screenshot, signIn } from "./lib.mjs";

export const LAPTOP = { width: 1280, height: 800 };

/** In the page: how the document, the table and the named texts fit the window. */
function measure({ table, unclipped }) {
  const doc = document.scrollingElement;
  const out = { page: { scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth }, viewport: window.innerWidth };
  if (table) {
    const t = document.querySelector(table);
    const wrap = t?.closest(".table-wrap") ?? t?.parentElement;
    const rows = t ? [...t.querySelectorAll("tr")] : [];
    const last = rows.map((tr) => tr.lastElementChild).filter(Boolean);
    const headers = t ? [...t.querySelectorAll("thead th")].map((th) => th.textContent.trim()) : [];
    out.table = {
      found: !!t, rows: t ? t.querySelectorAll("tbody tr").length : 0, headers,
      scrollWidth: wrap?.scrollWidth ?? 0, clientWidth: wrap?.clientWidth ?? 0,
      lastRight: Math.max(0, ...last.map((c) => c.getBoundingClientRect().right)),
      wrapRight: wrap ? wrap.getBoundingClientRect().right : 0,
    };
  }
  if (unclipped) {
    out.unclipped = [...document.querySelectorAll(unclipped)].map((e) => ({
      text: e.textContent.trim(), scrollWidth: e.scrollWidth, clientWidth: e.clientWidth,
      right: e.getBoundingClientRect().right,
    }));
  }
  return out;
}

await main("layout", 60_000, async (result) => {
  const base = env("GPUPLANE_UI_URL");
  const pages = JSON.parse(env("GPUPLANE_UI_LAYOUT"));

  const { watch, page } = await openWatchedPage(result, { viewport: LAPTOP });
  await signIn(page, base, env("GPUPLANE_UI_TOKEN"), "/jobs");
  watch.expect401 = false;

  result.pages = {};
  for (const p of pages) {
    result.at = p.path;
    if (p.days_later) await page.clock.install({ time: Date.now() + p.days_later * 86_400_000 });
    await page.goto(new URL(p.path, base).href);
    if (p.text) await page.waitForFunction((t) => document.body.innerText.includes(t), p.text);
    if (p.table) {
      await page.waitForFunction(({ sel, n }) => (document.querySelector(sel)?.querySelectorAll("tbody tr").length ?? 0) >= n,
        { sel: p.table, n: p.rows ?? 1 });
    }
    // Fonts and late data (summaries, node names) settle the column widths.
    await page.waitForFunction(() => document.querySelectorAll('[aria-busy="true"]').length === 0);
    await page.waitForTimeout(300);
    const m = await page.evaluate(measure, { table: p.table, unclipped: p.unclipped });
    result.pages[p.name] = m;
    check(result, m.page.scrollWidth <= m.page.clientWidth,
      `${p.name}: the page scrolls sideways (${m.page.scrollWidth} > ${m.page.clientWidth})`);
    if (p.table) {
      const t = m.table;
      check(result, t.found && t.rows >= (p.rows ?? 1), `${p.name}: ${p.table} has ${t.rows} rows`);
      check(result, t.scrollWidth <= t.clientWidth, `${p.name}: the table scrolls sideways (${t.scrollWidth} > ${t.clientWidth})`);
      check(result, t.lastRight <= m.viewport && t.lastRight <= t.wrapRight + 1,
        `${p.name}: the last column ends at ${t.lastRight}, past the window (${m.viewport}) or its box (${t.wrapRight})`);
    }
    for (const u of m.unclipped ?? []) {
      check(result, u.scrollWidth <= u.clientWidth && u.right <= m.viewport,
        `${p.name}: ${JSON.stringify(u.text)} is clipped (${u.scrollWidth} > ${u.clientWidth}, right ${u.right})`);
    }
    if (p.unclipped) check(result, (m.unclipped ?? []).length > 0, `${p.name}: nothing matches ${p.unclipped}`);
    await screenshot(page, `layout-${p.name}-1280`);
  }

  delete result.at;
  result.problems = watch.problems;
  for (const p of watch.problems) result.failures.push(p);
});
