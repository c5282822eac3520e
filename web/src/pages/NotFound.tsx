import { Link } from "../router/router";
import { Empty } from "../components/ui";

export function NotFound() {
  return (
    <div className="page">
      <Empty title="No page at this address" icon="search">
        The link may be from a newer GPUPlane. <Link to="/">Go to the dashboard</Link>.
      </Empty>
    </div>
  );
}
