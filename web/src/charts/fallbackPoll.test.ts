import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { FallbackPoll } from "./fallbackPoll";

describe("FallbackPoll", () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it("polls only while the stream is down, and not at all while it is up", () => {
    const poke = vi.fn();
    const poll = new FallbackPoll(poke, 3000);
    poll.onState("connecting");
    poll.onState("open");
    vi.advanceTimersByTime(60_000);
    expect(poke).not.toHaveBeenCalled(); // the stream is up: no timer

    poll.onState("reconnecting");
    poll.onState("reconnecting"); // every retry says so again: still one timer
    vi.advanceTimersByTime(9_000);
    expect(poke).toHaveBeenCalledTimes(3);
    expect(poll.polling).toBe(true);

    poll.onState("open"); // back: the polling stops at once
    vi.advanceTimersByTime(60_000);
    expect(poke).toHaveBeenCalledTimes(3);
    expect(poll.polling).toBe(false);
  });

  it("polls a stream the daemon refuses until it is stopped, and never while paused", () => {
    const poke = vi.fn();
    const poll = new FallbackPoll(poke, 1000);
    poll.onState("failed");
    vi.advanceTimersByTime(2_500);
    expect(poke).toHaveBeenCalledTimes(2);
    poll.onState("paused");
    vi.advanceTimersByTime(10_000);
    expect(poke).toHaveBeenCalledTimes(2);
    poll.onState("failed");
    poll.stop();
    vi.advanceTimersByTime(10_000);
    expect(poke).toHaveBeenCalledTimes(2);
    expect(vi.getTimerCount()).toBe(0);
  });
});
