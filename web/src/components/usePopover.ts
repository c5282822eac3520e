// A popover's closing rules: a press outside it, or Escape, which also gives the focus back to
// the button that opened it. ``listening`` false keeps it open (a confirmation inside it is up).

import { useEffect, useRef } from "react";

export function usePopover(open: boolean, setOpen: (open: boolean) => void, listening = true) {
  const box = useRef<HTMLDivElement>(null);
  const toggle = useRef<HTMLButtonElement>(null);
  useEffect(() => {
    if (!open || !listening) return;
    const close = (e: MouseEvent) => { if (!box.current?.contains(e.target as Node)) setOpen(false); };
    const onKey = (e: KeyboardEvent) => {
      if (e.key !== "Escape") return;
      setOpen(false);
      toggle.current?.focus();
    };
    document.addEventListener("mousedown", close);
    document.addEventListener("keydown", onKey);
    return () => { document.removeEventListener("mousedown", close); document.removeEventListener("keydown", onKey); };
  }, [open, setOpen, listening]);
  return { box, toggle };
}
