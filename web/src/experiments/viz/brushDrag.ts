// Whether a brush is being dragged on the page. What rebuilds whole charts (the panels taking
// a new set of runs) waits for the drag to end, so the brush keeps its frames: eight line
// charts built again under a drag cost it several frames of 30-100 ms each.

type Listener = () => void;

let dragging = 0;
const ended = new Set<Listener>();

export const brushDrag = {
  get active(): boolean {
    return dragging > 0;
  },
  start(): void {
    dragging++;
  },
  end(): void {
    if (dragging === 0) return;
    dragging--;
    if (dragging === 0) for (const listener of [...ended]) listener();
  },
  /** Told once no drag is left; returns the unsubscribe. */
  onEnd(listener: Listener): () => void {
    ended.add(listener);
    return () => {
      ended.delete(listener);
    };
  },
};
