// The window of a virtualised list with fixed row heights: which rows to render for a scroll
// position, how tall the spacers above and below are, and where to scroll to show a row.
// The window moves in blocks of rows, with a block to spare on each side: most scroll frames
// then change nothing in the DOM (the browser only scrolls), and one in a block swaps rows.

export interface VirtualWindow {
  start: number;
  /** Exclusive. */
  end: number;
  before: number;
  after: number;
}

export const BLOCK = 16;

export function virtualWindow(scrollTop: number, viewport: number, rowHeight: number, count: number,
  block = BLOCK): VirtualWindow {
  if (count <= 0 || rowHeight <= 0) return { start: 0, end: 0, before: 0, after: 0 };
  const top = Math.max(0, scrollTop);
  const first = Math.floor(top / rowHeight);
  const last = Math.ceil((top + Math.max(viewport, 0)) / rowHeight); // exclusive
  const start = Math.min(count, Math.max(0, (Math.floor(first / block) - 1) * block));
  const end = Math.max(start, Math.min(count, (Math.floor(last / block) + 2) * block));
  return { start, end, before: start * rowHeight, after: (count - end) * rowHeight };
}

export function sameWindow(a: VirtualWindow, b: VirtualWindow): boolean {
  return a.start === b.start && a.end === b.end && a.before === b.before && a.after === b.after;
}

/** The scroll position that brings row `index` into a viewport of `viewport` px (unchanged if it shows already). */
export function scrollToRow(index: number, scrollTop: number, viewport: number, rowHeight: number): number {
  const top = index * rowHeight;
  const bottom = top + rowHeight;
  if (top < scrollTop) return top;
  if (bottom > scrollTop + viewport) return Math.max(0, bottom - viewport);
  return scrollTop;
}
