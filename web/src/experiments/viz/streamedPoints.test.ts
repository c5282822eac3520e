import { describe, expect, it } from "vitest";
import { LiveBuckets, parseRunPoints } from "./streamedPoints";

const series = (steps: number[], value: (number | null)[]) => ({ step: steps, ts: steps.map((s) => 1000 + s), value });

describe("streamed points", () => {
  it("fill the overview's bucket grid from the bucket after the read's last one, the open bucket growing", () => {
    const b = new LiveBuckets();
    b.restart("a", "loss", 100, 10); // the read's last bucket is [100, 110): the server's
    expect(b.take("a", "loss", series([105, 109], [1, 1]), "step")).toBeNull();
    const first = b.take("a", "loss", series([110, 111, 125], [2, 4, 8]), "step")!;
    expect(first.from).toBe(110);
    expect(first.metrics.width).toBe(10);
    expect(first.metrics.x).toEqual([110, 120]);
    expect(first.metrics.series.loss).toEqual({ min: [2, 8], max: [4, 8], avg: [3, 8], last: [4, 8], count: [2, 1], nan: [0, 0] });
    // The next batch goes on in the open bucket [120, 130): it is sent again whole, with a point sent before left out.
    const next = b.take("a", "loss", series([125, 126], [8, 10]), "step")!;
    expect(next.from).toBe(120);
    expect(next.metrics.series.loss.avg).toEqual([9]);
    expect(next.metrics.series.loss.count).toEqual([2]);
  });

  it("take nothing for a metric never read, and read only batches of a run", () => {
    const b = new LiveBuckets();
    expect(b.take("a", "loss", series([1], [1]), "step")).toBeNull();
    b.restart("a", "loss", null, 1); // nothing yet: from the first point on
    expect(b.take("a", "loss", series([7], [1]), "ts")!.metrics.x).toEqual([1007]);
    expect(parseRunPoints("{}")).toBeNull();
    expect(parseRunPoints("not json")).toBeNull();
    expect(parseRunPoints('{"run_id":"a","seq":3,"series":{}}')).toEqual({ run_id: "a", seq: 3, series: {} });
  });
});
