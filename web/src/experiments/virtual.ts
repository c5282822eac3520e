// The window of a virtualised list with fixed row heights: which rows to render for a scroll
// position, how tall the spacers above and below are, and where to scroll to show a row.

export interface VirtualWindow {
  start: number;
  /** Exclusive. */
  end: number;
  before: number;
  after: number;
}

export function virtualWindow(scrollTop: number, viewport: number, rowHeight: number, count: number,
  overscan = 6): VirtualWindow {
  if (count <= 0 || rowHeight <= 0) return { start: 0, end: 0, before: 0, after: 0 };
  const top = Math.max(0, scrollTop);
  const start = Math.min(count, Math.max(0, Math.floor(top / rowHeight) - overscan));
  const end = Math.min(count, Math.ceil((top + Math.max(viewport, 0)) / rowHeight) + overscan);
  return { start, end: Math.max(start, end), before: start * rowHeight, after: (count - Math.max(start, end)) * rowHeight };
}

/** The scroll position that brings row `index` into a viewport of `viewport` px (unchanged if it shows already). */
export function scrollToRow(index: number, scrollTop: number, viewport: number, rowHeight: number): number {
  const top = index * rowHeight;
  const bottom = top + rowHeight;
  if (top < scrollTop) return top;
  if (bottom > scrollTop + viewport) return Math.max(0, bottom - viewport);
  return scrollTop;
}
