// Stable colors: a run keeps its color on every page and every visit (a hash of its id
// picks the slot), and runs shown together never share one while the palette lasts.

// 12 hues that stay apart on both themes (a Tableau-like set, tuned for dark backgrounds too).
export const PALETTE = [
  "#4e79d8", "#f28e2b", "#3fae5a", "#e15759", "#9b6fd0", "#17b3c4",
  "#d4a516", "#e377c2", "#9c6b3e", "#8ca03a", "#6f7f94", "#c2407e",
] as const;

export function hash(text: string): number {
  // FNV-1a, 32 bit.
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

export function colorOf(id: string): string {
  return PALETTE[hash(id) % PALETTE.length];
}

/**
 * Colors for a set of runs: each gets its hashed slot unless a run earlier in id order
 * took it, then the next free one. Deterministic for a given set, whatever the order asked.
 */
export function colorsFor(ids: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  const taken = new Set<number>();
  for (const id of [...new Set(ids)].sort()) {
    let slot = hash(id) % PALETTE.length;
    if (taken.size < PALETTE.length) {
      while (taken.has(slot)) slot = (slot + 1) % PALETTE.length;
    }
    taken.add(slot);
    out.set(id, PALETTE[slot]);
  }
  return out;
}

export function withAlpha(hex: string, alpha: number): string {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${(n >> 16) & 255}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
}
