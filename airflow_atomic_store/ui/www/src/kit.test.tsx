import { cleanup, render } from "@testing-library/react";
import type { ReactNode } from "react";
import { afterEach, describe, expect, it, vi } from "vitest";

import { Badge, DataTable, Heading, hostChakra } from "./kit";

afterEach(() => {
  cleanup();
  vi.unstubAllGlobals();
});

/** A stand-in for the host's Chakra UI: each part renders a marked element. */
function fakeChakra() {
  const part = (name: string) => ({ children, colorPalette, id }: { children?: ReactNode; colorPalette?: string; id?: string }) => (
    <div data-chakra={name} data-palette={colorPalette} id={id}>{children}</div>
  );
  const names = ["Box", "Heading", "Text", "Badge", "Button", "Input", "Code"];
  return {
    ...Object.fromEntries(names.map((name) => [name, part(name)])),
    Table: Object.fromEntries(["Root", "Header", "Body", "Row", "ColumnHeader", "Cell"].map((name) => [name, part(`Table.${name}`)])),
  };
}

describe("the kit", () => {
  it("draws with the host's Chakra UI when the host hands it over (Airflow 3.2+)", () => {
    vi.stubGlobal("ChakraUI", fakeChakra());
    expect(hostChakra()).not.toBeNull();
    render(<><Heading id="h">Title</Heading><Badge tone="green">done</Badge></>);
    expect(document.getElementById("h")?.getAttribute("data-chakra")).toBe("Heading");
    expect(document.querySelector("[data-chakra=Badge]")?.getAttribute("data-palette")).toBe("green");
  });

  it("draws plain elements in the theme's colours where the host has no Chakra UI (3.1)", () => {
    expect(hostChakra()).toBeNull();
    render(
      <DataTable id="t" rows={[{ k: "a" }]} rowKey={(r) => r.k} rowData={(r) => ({ key: r.k })} columns={[{ title: "Key", cell: (r) => r.k }]} />,
    );
    const table = document.getElementById("t")!;
    expect(table.tagName).toBe("TABLE");
    expect(table.style.color).toContain("--chakra-colors-fg");
    expect(table.querySelector("tr[data-key=a]")?.textContent).toBe("a");
  });

  it("falls back when the host's Chakra UI lacks a part it draws with", () => {
    vi.stubGlobal("ChakraUI", { Box: () => null });
    expect(hostChakra()).toBeNull();
  });
});
