import { describe, expect, it } from "vitest";
import type { TokenLimits } from "../api/types";
import { budget, limitsText, tokenState } from "./tokens";

const limits = (l: Partial<TokenLimits>): TokenLimits => ({ max_gpus_per_job: null, allowed_nodes: null, allowed_dirs: null,
  max_queued_jobs: null, gpu_hours: null, max_job_hours: null, unattended: false, ...l });

describe("a token", () => {
  it("is revoked, expired or active", () => {
    expect(tokenState({ revoked_at: 5, expires_at: null }, 10)).toBe("revoked");
    expect(tokenState({ revoked_at: null, expires_at: 10 }, 10)).toBe("expired");
    expect(tokenState({ revoked_at: null, expires_at: 11 }, 10)).toBe("active");
    expect(tokenState({ revoked_at: null, expires_at: null }, 10)).toBe("active");
  });

  it("says its limits in words", () => {
    expect(limitsText(null)).toBe("");
    expect(limitsText(limits({ max_gpus_per_job: 1, allowed_nodes: ["a", "b"], max_queued_jobs: 5, max_job_hours: 4, unattended: true })))
      .toBe("≤ 1 GPU a job · nodes a, b · ≤ 5 queued · jobs ≤ 4 h · unattended");
    expect(limitsText(limits({ max_gpus_per_job: 2, allowed_dirs: ["/data"] }))).toBe("≤ 2 GPUs a job · dirs /data");
  });

  it("has a GPU-hour budget with what is left, or none", () => {
    expect(budget({ limits: limits({ gpu_hours: 10 }), used_gpu_hours: 2.5, remaining_gpu_hours: 7.5 }))
      .toEqual({ total: 10, used: 2.5, left: 7.5, share: 0.75, text: "7.5 of 10 GPU-h left (2.5 used)" });
    expect(budget({ limits: limits({ gpu_hours: 3 }), used_gpu_hours: null, remaining_gpu_hours: null })?.text)
      .toBe("3 of 3 GPU-h left (0 used)");
    expect(budget({ limits: limits({}), used_gpu_hours: null, remaining_gpu_hours: null })).toBeNull();
    expect(budget({ limits: null, used_gpu_hours: null, remaining_gpu_hours: null })).toBeNull();
  });
});
