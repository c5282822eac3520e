import { render } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { ImportanceTable } from "./ImportanceTable";

describe("ImportanceTable", () => {
  it("lists keys by score, labels the thin ones insufficient and says which way is better", () => {
    const { container } = render(<ImportanceTable target="val/loss" labels={new Map([["optim.lr", "learning rate"]])} rows={[
      { key: "seed", score: 0.05, trialsPerValue: 50, insufficient: false, method: "spearman", better: null },
      { key: "optim.lr", score: 0.91, trialsPerValue: 50, insufficient: false, method: "spearman", better: "lower" },
      { key: "opt", score: 0.6, trialsPerValue: 3, insufficient: true, method: "eta", better: null },
      { key: "const", score: null, trialsPerValue: 200, insufficient: false, method: "eta", better: null },
    ]} />);
    const rows = [...container.querySelectorAll("tbody tr")];
    expect(rows.map((r) => r.getAttribute("data-key"))).toEqual(["optim.lr", "opt", "seed", "const"]);
    expect(rows[0].textContent).toContain("learning rate");
    expect(rows[0].textContent).toContain("0.91");
    expect(rows[0].textContent).toContain("↓ lower");
    expect(rows[1].textContent).toContain("insufficient");
    expect(rows[1].textContent).toContain("η");
    expect(rows.filter((r) => r.textContent!.includes("insufficient"))).toHaveLength(1);
    expect(rows[3].textContent).toContain("—");
    expect(container.querySelector("caption")!.textContent).toContain("val/loss");
  });
});
