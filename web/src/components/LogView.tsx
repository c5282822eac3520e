// A log tail with virtual scrolling: only the rows in view (plus a margin) are in the DOM,
// so 200k lines scroll like 200. It follows the end while the user is at the bottom and
// stops following as soon as they scroll up.

import { useCallback, useEffect, useLayoutEffect, useRef, useState } from "react";

export function visibleRange(scrollTop: number, viewport: number, rowHeight: number, count: number,
  overscan = 20): [number, number] {
  // A scroll position past the end (the lines were cut while scrolled down) shows the last page.
  const rows = Math.ceil(viewport / rowHeight);
  const first = Math.min(Math.floor(Math.max(0, scrollTop) / rowHeight), Math.max(0, count - rows));
  const last = first + rows;
  return [Math.max(0, first - overscan), Math.min(count, last + overscan)];
}

export interface LogViewProps {
  /** The lines (held by the caller, which bumps `version` when they change). */
  lines: readonly string[];
  version: number;
  /** Number of the first line held (lines dropped from the front keep the numbering). */
  firstLine?: number;
  follow: boolean;
  onFollowChange: (follow: boolean) => void;
  rowHeight?: number;
  highlight?: string;
  className?: string;
  empty?: React.ReactNode;
}

export function LogView({ lines, version, firstLine = 1, follow, onFollowChange, rowHeight = 18, highlight, className,
  empty }: LogViewProps) {
  const box = useRef<HTMLDivElement>(null);
  const [scrollTop, setScrollTop] = useState(0);
  const [viewport, setViewport] = useState(600);
  const programmatic = useRef(false);
  const count = lines.length;

  useLayoutEffect(() => {
    const el = box.current;
    if (!el) return;
    setViewport(el.clientHeight || 600);
    const observer = new ResizeObserver(() => setViewport(el.clientHeight || 600));
    observer.observe(el);
    return () => observer.disconnect();
  }, []);

  useLayoutEffect(() => {
    const el = box.current;
    if (!el || !follow) return;
    const bottom = Math.max(0, count * rowHeight - el.clientHeight);
    if (Math.abs(el.scrollTop - bottom) > 1) {
      programmatic.current = true;
      el.scrollTop = bottom;
    }
    setScrollTop(el.scrollTop || bottom);
  }, [version, count, follow, rowHeight, viewport]);

  const onScroll = useCallback(() => {
    const el = box.current;
    if (!el) return;
    setScrollTop(el.scrollTop);
    if (programmatic.current) {
      programmatic.current = false;
      return;
    }
    const atBottom = el.scrollTop + el.clientHeight >= el.scrollHeight - rowHeight;
    if (atBottom !== follow) onFollowChange(atBottom);
  }, [follow, onFollowChange, rowHeight]);

  useEffect(() => {
    if (follow && box.current) box.current.scrollTop = box.current.scrollHeight;
  }, [follow]);

  const [start, end] = visibleRange(scrollTop, viewport, rowHeight, count);
  const digits = String(firstLine + count).length;
  const rows = [];
  for (let i = start; i < end; i++) {
    const text = lines[i];
    rows.push(
      <div key={firstLine + i} className="log-row" style={{ top: i * rowHeight, height: rowHeight }} data-line={firstLine + i}>
        <span className="log-no" style={{ width: `calc(${digits}ch + 20px)` }}>{firstLine + i}</span>
        <span className="log-text">{highlight ? mark(text, highlight) : text}</span>
      </div>,
    );
  }
  return (
    <div ref={box} className={className ? `logview ${className}` : "logview"} onScroll={onScroll} role="log"
      aria-live="off" tabIndex={0}>
      {count === 0 && empty}
      <div className="log-spacer" style={{ height: count * rowHeight }}>{rows}</div>
    </div>
  );
}

function mark(text: string, needle: string): React.ReactNode {
  const i = text.toLowerCase().indexOf(needle.toLowerCase());
  if (i < 0) return text;
  return <>{text.slice(0, i)}<mark>{text.slice(i, i + needle.length)}</mark>{text.slice(i + needle.length)}</>;
}
