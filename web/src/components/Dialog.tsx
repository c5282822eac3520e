// A modal dialog (Escape or the backdrop closes it, focus moves in and back) and the
// confirmation dialog every destructive action goes through.

import { useEffect, useRef, useState, type ReactNode } from "react";
import { createPortal } from "react-dom";
import { Icon } from "./Icon";

const FOCUSABLE = "a[href], button, input, select, textarea, [tabindex]:not([tabindex='-1'])";

export function Dialog({ title, onClose, children, footer, wide }: {
  title: ReactNode; onClose: () => void; children: ReactNode; footer?: ReactNode; wide?: boolean }) {
  const box = useRef<HTMLDivElement>(null);
  const closeRef = useRef(onClose);
  closeRef.current = onClose;
  // What had the focus before the dialog: read on the first render, before a field's autoFocus
  // (applied when React commits) takes it; the focus goes back there on close.
  const [before] = useState(() => document.activeElement as HTMLElement | null);
  useEffect(() => {
    const first = box.current?.querySelector<HTMLElement>("[autofocus], input, textarea, select, button.btn-primary");
    (first ?? box.current)?.focus();
    const onKey = (e: KeyboardEvent) => {
      if (e.key === "Escape") {
        e.stopPropagation();
        closeRef.current();
      } else if (e.key === "Tab" && box.current) {
        // Modal: Tab and Shift+Tab go round the dialog's own controls, never to the page behind it.
        const inside = [...box.current.querySelectorAll<HTMLElement>(FOCUSABLE)].filter((el) => !el.hasAttribute("disabled"));
        if (!inside.length) return;
        const at = inside.indexOf(document.activeElement as HTMLElement);
        const next = e.shiftKey ? (at <= 0 ? inside.length - 1 : at - 1) : (at === inside.length - 1 ? 0 : at + 1);
        e.preventDefault();
        inside[next].focus();
      }
    };
    document.addEventListener("keydown", onKey);
    return () => {
      document.removeEventListener("keydown", onKey);
      before?.focus?.();
    };
  }, []);
  return createPortal(
    <div className="backdrop" onMouseDown={(e) => { if (e.target === e.currentTarget) onClose(); }}>
      <div className={wide ? "dialog wide" : "dialog"} role="dialog" aria-modal="true" aria-label={typeof title === "string" ? title : undefined}
        ref={box} tabIndex={-1}>
        <div className="dialog-head">
          <h2>{title}</h2>
          <button className="icon-btn" onClick={onClose} aria-label="Close"><Icon name="x" /></button>
        </div>
        <div className="dialog-body">{children}</div>
        {footer && <div className="dialog-foot">{footer}</div>}
      </div>
    </div>,
    document.body,
  );
}

export function ConfirmDialog({ title, children, confirm, danger, onConfirm, onClose }: {
  title: string; children: ReactNode; confirm: string; danger?: boolean;
  onConfirm: () => Promise<unknown>; onClose: () => void }) {
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState<string | null>(null);
  const go = async () => {
    setBusy(true);
    setError(null);
    try {
      await onConfirm();
      onClose();
    } catch (e) {
      setError((e as Error).message);
      setBusy(false);
    }
  };
  return (
    <Dialog title={title} onClose={onClose} footer={
      <>
        <button className="btn" onClick={onClose} disabled={busy}>Keep it</button>
        <button className={danger ? "btn btn-danger btn-primary" : "btn btn-primary"} onClick={go} disabled={busy}>
          {busy ? "Working…" : confirm}
        </button>
      </>
    }>
      {children}
      {error && <div className="banner banner-bad" role="alert"><Icon name="alert" />{error}</div>}
    </Dialog>
  );
}
