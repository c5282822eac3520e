// Chart colors come from the page's CSS variables, so charts follow the light/dark theme.

export interface ChartTheme {
  axis: string;
  grid: string;
  text: string;
  muted: string;
  accent: string;
  font: string;
  fontSmall: string;
  bg: string;
}

export function chartTheme(): ChartTheme {
  const css = getComputedStyle(document.documentElement);
  const v = (name: string, fallback: string) => css.getPropertyValue(name).trim() || fallback;
  const family = v("--font-sans", "system-ui, sans-serif");
  return {
    axis: v("--chart-axis", "#8a8f98"),
    grid: v("--chart-grid", "rgba(128,128,128,0.15)"),
    text: v("--text", "#222"),
    muted: v("--text-muted", "#777"),
    accent: v("--accent", "#4e79d8"),
    font: `11px ${family}`,
    fontSmall: `10px ${family}`,
    bg: v("--bg-elev", "#fff"),
  };
}
