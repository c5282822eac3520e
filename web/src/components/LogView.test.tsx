import { fireEvent, render } from "@testing-library/react";
import { describe, expect, it, vi } from "vitest";
import { LogView, visibleRange } from "./LogView";

describe("visibleRange", () => {
  it("covers the viewport plus the overscan, clamped to the lines", () => {
    expect(visibleRange(0, 360, 18, 100_000, 20)).toEqual([0, 40]);
    expect(visibleRange(18_000, 360, 18, 100_000, 20)).toEqual([980, 1040]);
    expect(visibleRange(1e9, 360, 18, 100, 20)).toEqual([60, 100]); // past the end: the last page
  });
});

function setup(count: number, follow: boolean, onFollowChange = vi.fn()) {
  const lines = Array.from({ length: count }, (_, i) => `line ${i + 1}`);
  const utils = render(<LogView lines={lines} version={1} follow={follow} onFollowChange={onFollowChange} rowHeight={18} />);
  const box = utils.container.querySelector(".logview") as HTMLDivElement;
  return { ...utils, box, lines, onFollowChange };
}

describe("LogView", () => {
  it("renders only the rows in view for a huge log", () => {
    const { container, box } = setup(200_000, false);
    const rows = container.querySelectorAll(".log-row");
    expect(rows.length).toBeLessThan(100);
    expect(rows[0].getAttribute("data-line")).toBe("1");
    // The spacer is as tall as all lines, so the scrollbar is honest.
    expect((box.querySelector(".log-spacer") as HTMLElement).style.height).toBe(`${200_000 * 18}px`);
  });

  it("renders the rows around the scroll position", () => {
    const { container, box } = setup(10_000, false);
    Object.defineProperty(box, "clientHeight", { value: 360, configurable: true });
    box.scrollTop = 18 * 5000;
    fireEvent.scroll(box);
    const numbers = [...container.querySelectorAll(".log-row")].map((r) => Number(r.getAttribute("data-line")));
    expect(Math.min(...numbers)).toBeGreaterThan(4900);
    expect(Math.max(...numbers)).toBeLessThan(5100);
    expect(numbers).toContain(5001);
    expect(container.querySelector('[data-line="5001"]')!.textContent).toContain("line 5001");
  });

  it("stops following when the user scrolls up", () => {
    const { box, onFollowChange } = setup(1000, true);
    Object.defineProperty(box, "clientHeight", { value: 360, configurable: true });
    Object.defineProperty(box, "scrollHeight", { value: 18_000, configurable: true });
    box.scrollTop = 100;
    fireEvent.scroll(box); // the first scroll event after a programmatic jump is ignored
    box.scrollTop = 50;
    fireEvent.scroll(box);
    expect(onFollowChange).toHaveBeenLastCalledWith(false);
  });

  it("numbers lines after the ones dropped from the front", () => {
    const lines = ["a", "b"];
    const { container } = render(<LogView lines={lines} version={1} firstLine={10_001} follow={false} onFollowChange={() => undefined} />);
    expect([...container.querySelectorAll(".log-no")].map((n) => n.textContent)).toEqual(["10001", "10002"]);
  });
});
