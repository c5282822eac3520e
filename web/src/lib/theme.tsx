// Light and dark themes: CSS variables switched by <html data-theme>, following the system
// (prefers-color-scheme) until the user picks one. The choice is a display preference,
// so it is kept in localStorage.

import { createContext, useContext, useEffect, useMemo, useState, type ReactNode } from "react";

export type ThemePreference = "system" | "light" | "dark";
export type Theme = "light" | "dark";

const KEY = "gpuplane.theme";

interface ThemeState {
  preference: ThemePreference;
  theme: Theme;
  setPreference: (p: ThemePreference) => void;
}

const ThemeContext = createContext<ThemeState>({ preference: "system", theme: "light", setPreference: () => undefined });

function systemTheme(): Theme {
  return window.matchMedia?.("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

function stored(): ThemePreference {
  const v = localStorage.getItem(KEY);
  return v === "light" || v === "dark" ? v : "system";
}

export function ThemeProvider({ children }: { children: ReactNode }) {
  const [preference, setPref] = useState<ThemePreference>(stored);
  const [system, setSystem] = useState<Theme>(systemTheme);
  useEffect(() => {
    const mq = window.matchMedia?.("(prefers-color-scheme: dark)");
    if (!mq) return;
    const on = () => setSystem(mq.matches ? "dark" : "light");
    mq.addEventListener("change", on);
    return () => mq.removeEventListener("change", on);
  }, []);
  const theme = preference === "system" ? system : preference;
  useEffect(() => {
    document.documentElement.dataset.theme = theme;
    document.documentElement.style.colorScheme = theme;
  }, [theme]);
  const value = useMemo(() => ({
    preference, theme,
    setPreference: (p: ThemePreference) => {
      if (p === "system") localStorage.removeItem(KEY);
      else localStorage.setItem(KEY, p);
      setPref(p);
    },
  }), [preference, theme]);
  return <ThemeContext.Provider value={value}>{children}</ThemeContext.Provider>;
}

export function useTheme(): ThemeState {
  return useContext(ThemeContext);
}
