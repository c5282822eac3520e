// The Settings pages' own tabs: Webhooks, Tokens, Audit log (each its own URL).

import { Link, useLocation } from "../router/router";

const PAGES = [
  { to: "/settings/webhooks", label: "Webhooks" },
  { to: "/settings/tokens", label: "Tokens" },
  { to: "/settings/audit", label: "Audit log" },
];

export function SettingsNav() {
  const { pathname } = useLocation();
  const current = pathname === "/settings" ? "/settings/webhooks" : pathname;
  return (
    <nav className="tabs settings-nav" aria-label="Settings">
      {PAGES.map((p) => (
        <Link key={p.to} to={p.to} className={current === p.to ? "tab active" : "tab"} aria-current={current === p.to ? "page" : undefined}>
          {p.label}
        </Link>
      ))}
    </nav>
  );
}
