import { describe, expect, it } from "vitest";
import { callerText } from "./Audit";

describe("an audit row's caller", () => {
  const names = new Map([["tok_1", "ci"]]);
  it("is the token's name, a browser session (of its token when the row names it), or the caller's kind", () => {
    expect(callerText({ caller_kind: "token", token_id: "tok_1", token_name: "ci" }, names)).toBe("ci");
    expect(callerText({ caller_kind: "local", token_id: null, token_name: "local" }, names)).toBe("local");
    expect(callerText({ caller_kind: "cookie", token_id: null, token_name: "uis_abc" }, names)).toBe("browser session");
    expect(callerText({ caller_kind: "cookie", token_id: "tok_1", token_name: null }, names)).toBe("browser session of ci");
    expect(callerText({ caller_kind: "public", token_id: null, token_name: null }, names)).toBe("public");
  });
});
