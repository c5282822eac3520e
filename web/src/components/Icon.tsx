// Inline SVG icons (24-unit grid, stroked): no icon font, nothing fetched.

const PATHS: Record<string, string> = {
  dashboard: "M4 4h7v7H4zM13 4h7v4h-7zM13 10h7v10h-7zM4 13h7v7H4z",
  jobs: "M8 6h12M8 12h12M8 18h12M4 6h.01M4 12h.01M4 18h.01",
  runs: "M3 17l5-6 4 3 4-7 5 5M3 21h18",
  compare: "M12 3l9 5-9 5-9-5 9-5zM3 13l9 5 9-5M3 17l9 5 9-5",
  sweeps: "M4 20V10M10 20V4M16 20v-7M22 20H2M4 10l6-6 6 9 5-5",
  pause: "M8 5v14M16 5v14",
  play: "M7 4l13 8-13 8z",
  nodes: "M4 5h16v6H4zM4 13h16v6H4zM8 8h.01M8 16h.01",
  events: "M6 8a6 6 0 1112 0c0 7 3 8 3 8H3s3-1 3-8M10.3 20a2 2 0 003.4 0",
  sun: "M12 4V2M12 22v-2M4 12H2M22 12h-2M5.6 5.6L4.2 4.2M19.8 19.8l-1.4-1.4M5.6 18.4l-1.4 1.4M19.8 4.2l-1.4 1.4M12 8a4 4 0 100 8 4 4 0 000-8z",
  moon: "M21 12.8A9 9 0 1111.2 3a7 7 0 009.8 9.8z",
  auto: "M12 3a9 9 0 100 18V3z M12 3a9 9 0 110 18",
  logout: "M9 21H5a2 2 0 01-2-2V5a2 2 0 012-2h4M16 17l5-5-5-5M21 12H9",
  plus: "M12 5v14M5 12h14",
  x: "M18 6L6 18M6 6l12 12",
  refresh: "M21 12a9 9 0 11-3-6.7L21 8M21 3v5h-5",
  search: "M11 4a7 7 0 100 14 7 7 0 000-14zM21 21l-4.3-4.3",
  copy: "M9 9h11v11H9zM5 15H4V4h11v1",
  check: "M5 12l5 5 9-10",
  chevronRight: "M9 6l6 6-6 6",
  chevronDown: "M6 9l6 6 6-6",
  arrowDown: "M12 5v14M6 13l6 6 6-6",
  zoomOut: "M11 4a7 7 0 100 14 7 7 0 000-14zM21 21l-4.3-4.3M8 11h6",
  gpu: "M3 7h18v10H3zM7 17v3M11 17v3M15 17v3M7 10h4v4H7zM14 10h3",
  stop: "M12 3a9 9 0 100 18 9 9 0 000-18zM9.5 9.5h5v5h-5z",
  retry: "M3 12a9 9 0 0115.5-6.3L21 8M21 3v5h-5M21 12a9 9 0 01-15.5 6.3L3 16M3 21v-5h5",
  key: "M15 7a4 4 0 11-4 4M11 11l-8 8M7 15l2 2M5 17l2 2",
  wrap: "M4 6h16M4 12h13a3 3 0 010 6h-4M15 16l-2 2 2 2M4 18h5",
  alert: "M12 3l10 18H2L12 3zM12 10v4M12 17h.01",
  evals: "M9 3h6v3H9zM7 4.5H5V21h14V4.5h-2M8.5 14l2.5 2.5 4.5-5",
  experiments: "M9 3h6M10 3v6l-5.6 9.5A1.7 1.7 0 005.9 21h12.2a1.7 1.7 0 001.5-2.5L14 9V3M7 15h10",
  columns: "M4 4h16v16H4zM10 4v16M16 4v16",
};

export function Icon({ name, size = 16, className }: { name: keyof typeof PATHS | string; size?: number; className?: string }) {
  return (
    <svg className={className ? `icon ${className}` : "icon"} width={size} height={size} viewBox="0 0 24 24" fill="none"
      stroke="currentColor" strokeWidth={1.8} strokeLinecap="round" strokeLinejoin="round" aria-hidden="true">
      <path d={PATHS[name] ?? ""} />
    </svg>
  );
}
