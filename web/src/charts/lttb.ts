// Largest-Triangle-Three-Buckets downsampling (Steinarsson 2013): keeps the shape of a
// line (peaks, dips) with `threshold` points. Used on the client only for live buffers
// that grew past their cap; the server downsamples everything it sends.

export function lttb(xs: ArrayLike<number>, ys: ArrayLike<number | null>, threshold: number): [number[], (number | null)[]] {
  const n = xs.length;
  if (threshold >= n || threshold < 3) return [Array.from(xs), Array.from(ys)];
  const outX: number[] = [xs[0]];
  const outY: (number | null)[] = [ys[0]];
  const every = (n - 2) / (threshold - 2);
  let a = 0;
  for (let i = 0; i < threshold - 2; i++) {
    const nextStart = Math.floor((i + 1) * every) + 1;
    const nextEnd = Math.min(Math.floor((i + 2) * every) + 1, n);
    let avgX = 0;
    let avgY = 0;
    let count = 0;
    for (let j = nextStart; j < nextEnd; j++) {
      const y = ys[j];
      if (y === null || !Number.isFinite(y)) continue;
      avgX += xs[j];
      avgY += y;
      count++;
    }
    if (count) {
      avgX /= count;
      avgY /= count;
    } else {
      avgX = xs[Math.min(nextStart, n - 1)];
      avgY = (ys[a] ?? 0) as number;
    }
    const start = Math.floor(i * every) + 1;
    const end = Math.floor((i + 1) * every) + 1;
    const ax = xs[a];
    const ay = (ys[a] ?? avgY) as number;
    let best = -1;
    let bestArea = -1;
    for (let j = start; j < end; j++) {
      const y = ys[j];
      if (y === null || !Number.isFinite(y)) continue;
      const area = Math.abs((ax - avgX) * (y - ay) - (ax - xs[j]) * (avgY - ay));
      if (area > bestArea) {
        bestArea = area;
        best = j;
      }
    }
    if (best < 0) best = start; // a bucket of gaps keeps one gap
    outX.push(xs[best]);
    outY.push(ys[best]);
    a = best;
  }
  outX.push(xs[n - 1]);
  outY.push(ys[n - 1]);
  return [outX, outY];
}
