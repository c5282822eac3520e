// Set the theme before the first paint (no light flash on a dark screen). A file, not an
// inline script, so a strict Content-Security-Policy (script-src 'self') allows it.
(function () {
  var p = null;
  try { p = localStorage.getItem("gpuplane.theme"); } catch (e) { /* storage blocked */ }
  var dark = p === "dark" || (p !== "light" && window.matchMedia && matchMedia("(prefers-color-scheme: dark)").matches);
  document.documentElement.dataset.theme = dark ? "dark" : "light";
})();
