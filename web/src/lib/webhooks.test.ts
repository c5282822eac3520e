import { describe, expect, it } from "vitest";
import { EMPTY_WEBHOOK_FORM, webhookBody } from "./webhooks";

describe("webhookBody", () => {
  it("maps the form to the API body: types upper-cased and unique, * alone, no empty secret", () => {
    expect(webhookBody({ ...EMPTY_WEBHOOK_FORM, url: " https://ntfy.sh/t ", events: "run_finished, OOM,oom", format: "ntfy" }))
      .toEqual({ body: { url: "https://ntfy.sh/t", events: ["RUN_FINISHED", "OOM"], severity: "info", format: "ntfy" } });
    expect(webhookBody({ ...EMPTY_WEBHOOK_FORM, url: "http://x/", events: "OOM,*", secret: "12345678" }).body)
      .toEqual({ url: "http://x/", events: ["*"], severity: "info", format: "json", secret: "12345678" });
  });

  it("names what is wrong", () => {
    expect(webhookBody({ ...EMPTY_WEBHOOK_FORM, url: "ftp://x" }).error).toMatch(/^URL/);
    expect(webhookBody({ ...EMPTY_WEBHOOK_FORM, url: "http://x/", events: " , " }).error).toMatch(/^Events/);
    expect(webhookBody({ ...EMPTY_WEBHOOK_FORM, url: "http://x/", severity: "loud" }).error).toMatch(/^Severity/);
    expect(webhookBody({ ...EMPTY_WEBHOOK_FORM, url: "http://x/", format: "xml" }).error).toMatch(/^Format/);
    expect(webhookBody({ ...EMPTY_WEBHOOK_FORM, url: "http://x/", secret: "short" }).error).toMatch(/^Secret/);
  });
});
