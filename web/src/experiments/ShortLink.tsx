// /v/<id>: a short link. It fetches the kept view and replaces the address with the full
// /experiments?<state>, so the address bar shows the whole state and a reload no longer
// depends on the link.

import { useEffect, useState } from "react";
import type { ApiError } from "../api/client";
import { Empty, ErrorBanner, Loading, PageHeader } from "../components/ui";
import { Link, navigate } from "../router/router";
import { workspaceApi } from "./api";
import { viewPath } from "./ShareViews";

export function ShortLink({ id }: { id: string }) {
  const [error, setError] = useState<ApiError | null>(null);
  useEffect(() => {
    const abort = new AbortController();
    workspaceApi.getView(id, abort.signal).then(
      (view) => navigate(viewPath(view), { replace: true }),
      (e) => { if ((e as Error).name !== "AbortError") setError(e as ApiError); });
    return () => abort.abort();
  }, [id]);
  if (!error) return <div className="page"><PageHeader title="Opening the view" /><Loading rows={2} /></div>;
  return (
    <div className="page">
      <PageHeader title="Shared view" />
      {error.status === 404 ? (
        <Empty title="No such view" icon="alert">
          The link <code>/v/{id}</code> names no view kept here (it may have been deleted). Open the <Link to="/experiments">Experiments</Link> page.
        </Empty>
      ) : <ErrorBanner error={error} />}
    </div>
  );
}
