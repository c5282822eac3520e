// /signin: paste an API token; the daemon answers with an HttpOnly session cookie and the
// browser goes back to where it was sent from. The token never leaves this form.

import { useState } from "react";
import { api, ApiError, safeNext } from "../api/client";
import { Icon } from "../components/Icon";
import { navigate, useLocation } from "../router/router";

export function SignIn() {
  const { search } = useLocation();
  const next = safeNext(new URLSearchParams(search).get("next"));
  const [token, setToken] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  const submit = async (e: React.FormEvent) => {
    e.preventDefault();
    if (!token.trim()) {
      setError("Paste an API token to sign in.");
      return;
    }
    setBusy(true);
    setError(null);
    try {
      await api.login(token.trim());
      setToken("");
      navigate(next, { replace: true });
    } catch (err) {
      setError(err instanceof ApiError ? err.message : "Sign-in failed.");
      setBusy(false);
    }
  };

  return (
    <div className="signin">
      <form className="signin-card" onSubmit={submit}>
        <div className="signin-brand">
          <svg viewBox="0 0 32 32" width="28" height="28" aria-hidden="true"><rect width="32" height="32" rx="7" fill="var(--accent)" />
            <path d="M7 21l5-6 4 3 4-7 5 5" fill="none" stroke="#fff" strokeWidth="2.6" strokeLinecap="round" strokeLinejoin="round" /></svg>
          <h1>Sign in to GPUPlane</h1>
        </div>
        <label className="field">
          <span>API token</span>
          <input type="password" className="mono" autoComplete="off" autoFocus value={token} spellCheck={false}
            onChange={(e) => setToken(e.target.value)} placeholder="gpp_…" aria-invalid={!!error} />
        </label>
        {error && <div className="banner banner-bad" role="alert"><Icon name="alert" />{error}</div>}
        <button className="btn btn-primary btn-block" disabled={busy}>{busy ? "Signing in…" : "Sign in"}</button>
        <p className="signin-help">
          On the machine that runs the daemon, <code>gpuplanectl ui</code> prints a one-time sign-in link;
          or create a token there with <code>gpuplanectl token create laptop --scope write</code>.
        </p>
      </form>
    </div>
  );
}
