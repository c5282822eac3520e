// Shared by the browser tests in this folder: Debian's chromium driven by playwright-core
// (no browser download), a watcher for console errors and failed requests, sign-in, and
// the one JSON line every script prints for tests/ui/test_ui_e2e.py to parse.
//
// Environment (set by the pytest side):
//   GPUPLANE_UI_URL     the daemon's HTTP front, e.g. http://127.0.0.1:40123
//   GPUPLANE_UI_TOKEN   an API token with read and write
//   GPUPLANE_UI_SHOTS   where screenshots go (default: none are taken)
//   GPUPLANE_CHROMIUM   the browser (default /usr/bin/chromium)
// A script waits on conditions in the page, never for a fixed time, and exits 0 only when
// every check passed; its JSON line lists what failed.

import { chromium } from "playwright-core";
import { mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const CHROMIUM = process.env.GPUPLANE_CHROMIUM || "/usr/bin/chromium";
export const ARGS = [
  "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync",
];
export const VIEWPORT = { width: 1400, height: 900 };

export function env(name, fallback) {
  const value = process.env[name];
  if (value === undefined || value === "") {
    if (fallback !== undefined) return fallback;
    throw new Error(`${name} is not set`);
  }
  return value;
}

/** A browser with a fresh profile (its own --user-data-dir, removed on close). */
export async function openBrowser(options = {}) {
  const profile = mkdtempSync(join(tmpdir(), "gpuplane-e2e-profile-"));
  let context;
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM, headless: true, args: ARGS, viewport: VIEWPORT, timeout: 30_000, ...options,
    });
  } catch (error) {
    rmSync(profile, { recursive: true, force: true });
    throw error;
  }
  context.setDefaultTimeout(15_000);
  context.setDefaultNavigationTimeout(20_000);
  return {
    context,
    async close() {
      try {
        await context.close();
      } finally {
        rmSync(profile, { recursive: true, force: true });
      }
    },
  };
}

/**
 * Console errors, uncaught page errors, failed requests and HTTP errors, from every page of
 * a context. A 401 is expected only while `expect401` is set (before signing in, a wrong
 * token, a spent login link); an aborted request is the app's own doing (leaving a page
 * closes its streams and cancels its fetches), never a failure.
 */
export class Watch {
  constructor() {
    this.problems = [];
    this.expect401 = true;
    this.responses401 = 0;
  }

  attach(context) {
    const onPage = (page) => {
      page.on("console", (message) => {
        if (message.type() !== "error") return;
        const text = message.text();
        if (this.expect401 && /status of 401/.test(text)) return;
        this.problems.push(`console error on ${page.url()}: ${text}`);
      });
      page.on("pageerror", (error) => this.problems.push(`uncaught error on ${page.url()}: ${error.message}`));
    };
    context.pages().forEach(onPage);
    context.on("page", onPage);
    context.on("requestfailed", (request) => {
      const reason = request.failure()?.errorText ?? "";
      if (reason === "net::ERR_ABORTED") return;
      this.problems.push(`request failed: ${request.method()} ${request.url()}: ${reason}`);
    });
    context.on("response", (response) => {
      const status = response.status();
      if (status < 400) return;
      if (status === 401 && this.expect401) {
        this.responses401++;
        return;
      }
      this.problems.push(`HTTP ${status}: ${response.request().method()} ${response.url()}`);
    });
  }
}

/**
 * A fresh browser whose pages are watched, and its first page. Both are put on `result`, so
 * that `main` closes the browser and takes a screenshot of the page when the script fails.
 */
export async function openWatchedPage(result, options = {}) {
  const browser = await openBrowser(options);
  result.close = browser.close;
  const watch = new Watch();
  watch.attach(browser.context);
  const page = browser.context.pages()[0] ?? await browser.context.newPage();
  result.page = page;
  return { browser, watch, page };
}

/** Sign in on /signin with a token; resolves once the app has left the sign-in page. */
export async function signIn(page, base, token, next = "/") {
  await page.goto(new URL(next === "/" ? "/signin" : `/signin?next=${encodeURIComponent(next)}`, base).href);
  await page.getByLabel("API token").fill(token);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.waitForURL((u) => u.pathname !== "/signin");
}

/** The page's theme, picked with the sidebar's switch (kept in localStorage). */
export async function setTheme(page, theme) {
  await page.getByRole("button", { name: theme === "dark" ? "Dark" : "Light", exact: true }).click();
  await page.waitForFunction((t) => document.documentElement.dataset.theme === t, theme);
}

export async function screenshot(page, name) {
  const dir = process.env.GPUPLANE_UI_SHOTS;
  if (!dir) return null;
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${name}.png`);
  await page.screenshot({ path, fullPage: true, animations: "disabled", caret: "hide" });
  return path;
}

/** A check: records a failure instead of throwing, so one run reports every problem. */
export function check(result, ok, message) {
  if (!ok) result.failures.push(message);
  return ok;
}

/**
 * Run `body(result)` with a time limit, then print `result` as one JSON line and exit
 * 0 (every check passed) or 1. An exception is a failure too (with a screenshot of the
 * page named in `result.page`, when there is one).
 */
export async function main(name, limitMs, body) {
  const started = performance.now();
  const result = { script: name, failures: [] };
  const watchdog = setTimeout(() => {
    result.failures.push(`${name} did not finish within ${limitMs / 1000} s`);
    finish(result, started);
    process.exit(1);
  }, limitMs);
  try {
    await body(result);
  } catch (error) {
    const where = result.at ? ` (at ${result.at})` : "";
    result.failures.push(`${error.name ?? "Error"}${where}: ${error.message}`.split("\n").slice(0, 8).join("\n"));
    if (result.page) {
      try {
        result.failure_shot = await screenshot(result.page, `failure-${name}`);
      } catch {
        // the page may be gone
      }
    }
  } finally {
    if (result.close) await result.close().catch(() => undefined);
  }
  clearTimeout(watchdog);
  finish(result, started);
  process.exit(result.failures.length ? 1 : 0);
}

function finish(result, started) {
  const { page: _page, close: _close, ...out } = result;
  out.elapsed_ms = Math.round(performance.now() - started);
  out.ok = out.failures.length === 0;
  process.stdout.write(`${JSON.stringify(out)}\n`);
}

/** Resolves once `ok()` holds (asked every 50 ms), or after `ms`. */
export async function until(ok, ms) {
  const end = performance.now() + ms;
  while (!ok() && performance.now() < end) await new Promise((r) => setTimeout(r, 50));
}

/**
 * The requests of a context whose path matches one of `patterns`, by pattern: when each was
 * asked and when each 200 came, in the browser's order (what follows an answer was asked after
 * it), and which are not answered yet (an open stream never is).
 */
export class RequestLog {
  constructor(context, patterns) {
    this.asked = new Map(patterns.map((p) => [p, []]));
    this.ok = new Map(patterns.map((p) => [p, []]));
    this.unanswered = new Set();
    const matching = (r) => patterns.filter((p) => p.test(new URL(r.url()).pathname));
    context.on("request", (r) => {
      const hits = matching(r);
      for (const p of hits) this.asked.get(p).push(performance.now());
      if (hits.length) this.unanswered.add(r);
    });
    context.on("response", (r) => {
      if (r.status() === 200) for (const p of matching(r)) this.ok.get(p).push(performance.now());
    });
    for (const done of ["requestfinished", "requestfailed"]) context.on(done, (r) => this.unanswered.delete(r));
  }

  /** The requests of `pattern` asked at or after `t`. */
  since(pattern, t) {
    return this.asked.get(pattern).filter((at) => at >= t).length;
  }

  /**
   * Resolves once a stream that answered at `tOpen` has brought its page up to date: each
   * `[pattern, n]` of `wants` asked `n` times since (the requests its first event makes, asked
   * only once it answered), and every request logged answered but those of the `streams`
   * patterns; then `settleMs` more. A span that counts requests starts after it.
   */
  async caughtUp(page, tOpen, wants, streams, settleMs) {
    const streaming = (r) => streams.some((p) => p.test(new URL(r.url()).pathname));
    await until(() => wants.every(([p, n]) => this.since(p, tOpen) >= n) && [...this.unanswered].every(streaming), 10_000);
    await page.waitForTimeout(settleMs);
  }
}

/** The tab hidden or shown, as the page sees it (headless chromium never hides a tab itself). */
export async function setVisibility(page, state) {
  await page.evaluate((s) => {
    Object.defineProperty(document, "visibilityState", { configurable: true, get: () => s });
    Object.defineProperty(document, "hidden", { configurable: true, get: () => s === "hidden" });
    document.dispatchEvent(new Event("visibilitychange"));
  }, state);
}
