// The shell: a sidebar with the pages, the theme switch and the session, and the page the
// URL names. /signin stands alone.

import { useEffect, useState } from "react";
import { api } from "./api/client";
import type { AuthSession } from "./api/types";
import { Icon } from "./components/Icon";
import { useTheme, type ThemePreference } from "./lib/theme";
import { Link, matchPath, navigate, useLocation } from "./router/router";
import { Compare } from "./pages/Compare";
import { Dashboard } from "./pages/Dashboard";
import { Evaluations } from "./pages/Evaluations";
import { Events } from "./pages/Events";
import { Experiments } from "./pages/Experiments";
import { ShortLink } from "./experiments/ShortLink";
import { JobDetail } from "./pages/JobDetail";
import { Jobs } from "./pages/Jobs";
import { Nodes } from "./pages/Nodes";
import { RunDetail } from "./pages/RunDetail";
import { Runs } from "./pages/Runs";
import { SignIn } from "./pages/SignIn";
import { SweepDetail } from "./pages/SweepDetail";
import { Sweeps } from "./pages/Sweeps";
import { Webhooks } from "./pages/Webhooks";
import { Audit } from "./pages/Audit";
import { Tokens } from "./pages/Tokens";
import { NotFound } from "./pages/NotFound";

// Pages are in the main bundle: a lazy page would pass through a Suspense boundary, which
// React 19 holds back for 300 ms, more than loading the whole app takes here.

const NAV = [
  { to: "/", label: "Dashboard", icon: "dashboard", match: (p: string) => p === "/" },
  { to: "/jobs", label: "Jobs", icon: "jobs", match: (p: string) => p.startsWith("/jobs") },
  { to: "/runs", label: "Runs", icon: "runs", match: (p: string) => p.startsWith("/runs") },
  { to: "/experiments", label: "Experiments", icon: "experiments",
    match: (p: string) => p.startsWith("/experiments") || p.startsWith("/v/") },
  { to: "/sweeps", label: "Sweeps", icon: "sweeps", match: (p: string) => p.startsWith("/sweeps") },
  { to: "/compare", label: "Compare", icon: "compare", match: (p: string) => p.startsWith("/compare") },
  { to: "/evaluations", label: "Evaluations", icon: "evals", match: (p: string) => p.startsWith("/evaluations") },
  { to: "/nodes", label: "Nodes", icon: "nodes", match: (p: string) => p.startsWith("/nodes") },
  { to: "/events", label: "Events", icon: "events", match: (p: string) => p.startsWith("/events") },
  { to: "/settings/webhooks", label: "Settings", icon: "key", match: (p: string) => p.startsWith("/settings") },
];

function Page({ pathname }: { pathname: string }) {
  if (pathname === "/") return <Dashboard />;
  if (pathname === "/jobs") return <Jobs />;
  let m = matchPath("/jobs/:id", pathname);
  if (m) return <JobDetail id={m.id} />;
  if (pathname === "/runs") return <Runs />;
  m = matchPath("/runs/:id", pathname);
  if (m) return <RunDetail id={m.id} />;
  if (pathname === "/sweeps") return <Sweeps />;
  m = matchPath("/sweeps/:id", pathname);
  if (m) return <SweepDetail id={m.id} />;
  if (pathname === "/experiments") return <Experiments />;
  m = matchPath("/v/:id", pathname);
  if (m) return <ShortLink id={m.id} />;
  if (pathname === "/compare") return <Compare />;
  if (pathname === "/evaluations") return <Evaluations />;
  if (pathname === "/nodes") return <Nodes />;
  if (pathname === "/events") return <Events />;
  if (pathname === "/settings/webhooks" || pathname === "/settings") return <Webhooks />;
  if (pathname === "/settings/tokens") return <Tokens />;
  if (pathname === "/settings/audit") return <Audit />;
  return <NotFound />;
}

const THEMES: { id: ThemePreference; icon: string; label: string }[] = [
  { id: "light", icon: "sun", label: "Light" },
  { id: "dark", icon: "moon", label: "Dark" },
  { id: "system", icon: "auto", label: "Match the system" },
];

function ThemeSwitch() {
  const { preference, setPreference } = useTheme();
  return (
    <div className="theme-switch" role="group" aria-label="Theme">
      {THEMES.map((t) => (
        <button key={t.id} className={preference === t.id ? "on" : ""} onClick={() => setPreference(t.id)} title={t.label}
          aria-label={t.label} aria-pressed={preference === t.id}>
          <Icon name={t.icon} size={14} />
        </button>
      ))}
    </div>
  );
}

function SessionBox() {
  const [session, setSession] = useState<AuthSession | null>(null);
  useEffect(() => {
    const abort = new AbortController();
    api.session(abort.signal).then(setSession, () => setSession(null));
    return () => abort.abort();
  }, []);
  if (!session) return null;
  const signOut = async () => {
    try {
      await api.logout();
    } finally {
      navigate("/signin");
    }
  };
  return (
    <div className="session">
      <span className="session-who" title={`Scopes: ${session.scopes.join(", ")}`}>
        <Icon name="key" size={13} />{session.scopes.includes("admin") ? "admin" : session.scopes.join(" · ")}
      </span>
      <button className="icon-btn" onClick={signOut} title="Sign out" aria-label="Sign out"><Icon name="logout" size={14} /></button>
    </div>
  );
}

export function App() {
  const { pathname } = useLocation();
  useEffect(() => {
    window.scrollTo(0, 0);
  }, [pathname]);
  if (pathname === "/signin") return <SignIn />;
  return (
    <div className="shell">
      <nav className="sidebar" aria-label="Pages">
        <Link to="/" className="brand" aria-label="GPUPlane home">
          <svg viewBox="0 0 32 32" width="22" height="22" aria-hidden="true"><rect width="32" height="32" rx="7" fill="var(--accent)" />
            <path d="M7 21l5-6 4 3 4-7 5 5" fill="none" stroke="#fff" strokeWidth="2.6" strokeLinecap="round" strokeLinejoin="round" /></svg>
          <span>GPUPlane</span>
        </Link>
        <ul>
          {NAV.map((n) => (
            <li key={n.to}>
              <Link to={n.to} className={n.match(pathname) ? "nav active" : "nav"} aria-current={n.match(pathname) ? "page" : undefined}>
                <Icon name={n.icon} /><span>{n.label}</span>
              </Link>
            </li>
          ))}
        </ul>
        <div className="sidebar-foot">
          <SessionBox />
          <ThemeSwitch />
        </div>
      </nav>
      <main className="main">
        <Page pathname={pathname} />
      </main>
    </div>
  );
}
