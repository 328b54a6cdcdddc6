/**
 * At most `perSecond` lines a second for one kind of log line: a storm of refused requests
 * (an overloaded router answering 429s) must not add a log write to each of them. What was
 * left out is counted and reported in one line when the next second's first line goes out.
 * (A router request keeps its terminal record either way.)
 */
export class LineBudget {
  private second = -1;
  private used = 0;
  private skipped = 0;

  constructor(
    private readonly perSecond: number,
    private readonly onSkipped: (skipped: number) => void,
  ) {}

  /** True when one more line may be written now. */
  take(nowMs: number): boolean {
    const s = Math.floor(nowMs / 1000);
    if (s !== this.second) {
      this.second = s;
      this.used = 0;
      if (this.skipped > 0) {
        const n = this.skipped;
        this.skipped = 0;
        this.onSkipped(n);
      }
    }
    if (this.used < this.perSecond) {
      this.used++;
      return true;
    }
    this.skipped++;
    return false;
  }
}
