// The run a page points at (a parallel-coordinates line, a scatter dot, a table row), for its
// charts to stress without a React render: they subscribe and restyle themselves (a hover must
// not re-render every chart of the page).

export type HighlightListener = (run: string | null) => void;

export class RunHighlight {
  private run: string | null = null;
  private readonly listeners = new Set<HighlightListener>();

  get current(): string | null {
    return this.run;
  }

  set(run: string | null): void {
    if (run === this.run) return;
    this.run = run;
    for (const listener of [...this.listeners]) listener(run);
  }

  /** Told of every change; returns the unsubscribe. */
  subscribe(listener: HighlightListener): () => void {
    this.listeners.add(listener);
    return () => {
      this.listeners.delete(listener);
    };
  }
}
