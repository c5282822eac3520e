import { fireEvent, render } from "@testing-library/react";
import { describe, expect, it } from "vitest";
import { ConfirmDialog } from "./Dialog";

describe("a confirmation dialog by keyboard", () => {
  it("starts on its action, keeps Tab and Shift+Tab inside, and closes on Escape", () => {
    let closed = 0;
    const { baseElement } = render(
      <>
        <button>behind</button>
        <ConfirmDialog title="Cancel sweep s?" confirm="Cancel sweep" danger onConfirm={async () => undefined}
          onClose={() => { closed++; }}><p>Its trials stop.</p></ConfirmDialog>
      </>,
    );
    const focused = () => (baseElement.ownerDocument.activeElement as HTMLElement).textContent || (baseElement.ownerDocument.activeElement as HTMLElement).getAttribute("aria-label");
    expect(focused()).toBe("Cancel sweep");
    const tab = (shiftKey = false) => fireEvent.keyDown(baseElement.ownerDocument, { key: "Tab", shiftKey });
    tab();
    expect(focused()).toBe("Close"); // round from the last control to the first, never "behind"
    tab();
    expect(focused()).toBe("Keep it");
    tab(true);
    tab(true);
    expect(focused()).toBe("Cancel sweep");
    fireEvent.keyDown(baseElement.ownerDocument, { key: "Escape" });
    expect(closed).toBe(1);
  });
});
