// Canvas plumbing shared by the parallel coordinates and the scatter: follow the host's
// width (one React render per resize, none per mouse move), size the backing store for
// the device pixel ratio, and coalesce redraws into one per animation frame.

import { useCallback, useEffect, useLayoutEffect, useRef, useState } from "react";

/** The host element's width, followed with a ResizeObserver. */
export function useWidth<T extends HTMLElement>(): [React.RefObject<T | null>, number] {
  const host = useRef<T>(null);
  const [width, setWidth] = useState(0);
  useLayoutEffect(() => {
    const el = host.current;
    if (!el) return;
    setWidth(el.clientWidth);
    let frame = 0;
    const observer = new ResizeObserver(() => {
      cancelAnimationFrame(frame);
      frame = requestAnimationFrame(() => setWidth(el.clientWidth));
    });
    observer.observe(el);
    return () => {
      cancelAnimationFrame(frame);
      observer.disconnect();
    };
  }, []);
  return [host, width];
}

/** The 2D context scaled to CSS pixels, after sizing the canvas; null where there is none (jsdom). */
export function prepare(canvas: HTMLCanvasElement, width: number, height: number): CanvasRenderingContext2D | null {
  const dpr = window.devicePixelRatio || 1;
  const w = Math.max(1, Math.round(width * dpr));
  const h = Math.max(1, Math.round(height * dpr));
  if (canvas.width !== w) canvas.width = w;
  if (canvas.height !== h) canvas.height = h;
  let ctx: CanvasRenderingContext2D | null = null;
  try {
    ctx = canvas.getContext("2d");
  } catch {
    ctx = null; // jsdom without the canvas package
  }
  if (!ctx) return null;
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, width, height);
  return ctx;
}

/** A redraw scheduler: any number of requests in a frame run `draw` once, in that frame. */
export function useFrame(draw: () => void): () => void {
  const frame = useRef(0);
  const drawRef = useRef(draw);
  drawRef.current = draw;
  useEffect(() => () => cancelAnimationFrame(frame.current), []);
  return useCallback(() => {
    if (frame.current) return;
    frame.current = requestAnimationFrame(() => {
      frame.current = 0;
      drawRef.current();
    });
  }, []);
}

/** `text` cut with an ellipsis to fit `max` pixels. */
export function fit(ctx: CanvasRenderingContext2D, text: string, max: number): string {
  if (ctx.measureText(text).width <= max) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(`${text.slice(0, mid)}…`).width <= max) lo = mid;
    else hi = mid - 1;
  }
  return `${text.slice(0, lo)}…`;
}

/** The pointer's position in the element's CSS pixels. */
export function localPoint(e: { clientX: number; clientY: number }, el: Element): [number, number] {
  const r = el.getBoundingClientRect();
  return [e.clientX - r.left, e.clientY - r.top];
}
