import { describe, expect, it } from "vitest";
import { TailQueue } from "./loader";

function deferred() {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

describe("TailQueue", () => {
  it("fetches once per burst of announcements, never two at a time", async () => {
    const calls: boolean[] = [];
    const gates: ReturnType<typeof deferred>[] = [];
    const queue = new TailQueue((full) => {
      calls.push(full);
      const gate = deferred();
      gates.push(gate);
      return gate.promise;
    });
    queue.poke(false);
    queue.poke(false);
    queue.poke(false);
    expect(calls).toEqual([false]);
    gates[0].resolve();
    await Promise.resolve();
    await Promise.resolve();
    expect(calls).toEqual([false, false]); // the two announced meanwhile: one more fetch
    gates[1].resolve();
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toEqual([false, false]);
  });

  it("a reset announced during a tail makes the next fetch a full one", async () => {
    const calls: boolean[] = [];
    const gate = deferred();
    const queue = new TailQueue(async (full) => {
      calls.push(full);
      if (calls.length === 1) await gate.promise;
    });
    queue.poke(false);
    queue.poke(true);
    queue.poke(false);
    gate.resolve();
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toEqual([false, true]);
  });
});
