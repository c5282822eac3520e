// For the jsdom tests: jsdom has no 2D canvas, so this records what a chart draws. Every
// method call and property set on the context is logged in order; measureText answers
// 6 px per character. Install it before rendering; uninstall after.

export interface CanvasCall {
  op: string;
  args: unknown[];
}

export interface CanvasRecorder {
  calls: CanvasCall[];
  uninstall: () => void;
}

export function recordCanvas(): CanvasRecorder {
  const calls: CanvasCall[] = [];
  const proto = HTMLCanvasElement.prototype;
  const original = Object.getOwnPropertyDescriptor(proto, "getContext")!;
  const contexts = new WeakMap<HTMLCanvasElement, unknown>();
  Object.defineProperty(proto, "getContext", {
    configurable: true,
    value(this: HTMLCanvasElement) {
      let ctx = contexts.get(this);
      if (!ctx) {
        const state: Record<string | symbol, unknown> = { canvas: this };
        ctx = new Proxy(state, {
          get(target, prop) {
            if (prop in target) return target[prop];
            if (prop === "measureText") return (text: string) => ({ width: String(text).length * 6 });
            if (prop === "getLineDash") return () => [];
            if (typeof prop === "symbol") return undefined;
            return (...args: unknown[]) => {
              calls.push({ op: prop, args });
              return prop.startsWith("create") ? { addColorStop: () => undefined } : undefined;
            };
          },
          set(target, prop, value) {
            target[prop] = value;
            calls.push({ op: `set:${String(prop)}`, args: [value] });
            return true;
          },
        });
        contexts.set(this, ctx);
      }
      return ctx;
    },
  });
  // uPlot builds its lines as Path2D objects, which jsdom lacks too: a path that keeps nothing.
  // It stays after uninstall: uPlot may still commit a frame queued before its chart was destroyed.
  const g = globalThis as { Path2D?: unknown };
  if (!("Path2D" in g)) {
    g.Path2D = class {
      moveTo(): void {}
      lineTo(): void {}
      rect(): void {}
      arc(): void {}
      bezierCurveTo(): void {}
      quadraticCurveTo(): void {}
      closePath(): void {}
      addPath(): void {}
    };
  }
  return { calls, uninstall: () => Object.defineProperty(proto, "getContext", original) };
}

/** Give every element a width (jsdom lays nothing out), for components that size to their host. */
export function fakeWidth(width: number): () => void {
  const proto = HTMLElement.prototype;
  const original = Object.getOwnPropertyDescriptor(proto, "clientWidth");
  Object.defineProperty(proto, "clientWidth", { configurable: true, get: () => width });
  return () => {
    if (original) Object.defineProperty(proto, "clientWidth", original);
  };
}

/** Let the pending animation frames run. */
export function nextFrame(): Promise<void> {
  return new Promise((resolve) => requestAnimationFrame(() => resolve()));
}
