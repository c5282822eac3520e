import { describe, expect, it } from "vitest";
import type { JobState } from "../api/types";
import { attemptDetail, attemptText, shownAttempt } from "./attempts";

const job = (status: JobState, attempt: number, max_attempts: number) => ({ status, attempt, max_attempts });

describe("a job's attempt", () => {
  it("never reads as more attempts than the policy allows: manual retries say how many they were", () => {
    expect(attemptText(job("FAILED", 3, 1))).toBe("3");  // the jobs table said "3/1"
    expect(attemptDetail(job("FAILED", 3, 1))).toBe("3 (2 retries)");  // the job page said "3 of 1"
    expect(attemptDetail(job("FAILED", 2, 1))).toBe("2 (1 retry)");
    expect(attemptText(job("FAILED", 5, 3))).toBe("5");
    expect(attemptDetail(job("FAILED", 5, 3))).toBe("5 (4 retries; the retry policy allows 3)");
  });

  it("within a retry policy is its place in it", () => {
    expect(attemptText(job("RUNNING", 2, 3))).toBe("2/3");
    expect(attemptDetail(job("RUNNING", 2, 3))).toBe("2 of 3");
    expect(attemptText(job("SUCCEEDED", 1, 1))).toBe("1");
    expect(attemptDetail(job("SUCCEEDED", 1, 1))).toBe("1");
  });

  it("of a waiting job is the one it will run as, not the one that ended", () => {
    expect(shownAttempt(job("QUEUED", 0, 1))).toBe(1);
    expect(attemptText(job("QUEUED", 0, 3))).toBe("1/3");
    expect(attemptText(job("QUEUED", 2, 1))).toBe("3");  // retried by hand
    expect(attemptDetail(job("QUEUED", 2, 1))).toBe("3 (2 retries)");
    expect(attemptDetail(job("CREATED", 1, 3))).toBe("2 of 3");
    expect(shownAttempt(job("DISPATCHING", 2, 3))).toBe(2);
  });
});
