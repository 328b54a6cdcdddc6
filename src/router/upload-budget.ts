/**
 * The bytes of request bodies held while they arrive, across every request: each may be
 * `max_body_bytes`, and a slow client holds its share until its body is whole, so without a
 * bound clients could make the router hold any amount. Checked before admission (the alias is
 * in the body), so refused as admission is: 429.
 */
export class UploadBudget {
  private held = 0;
  constructor(readonly limit: number) {}

  /** True when `n` more bytes may be held (and they are then counted). */
  take(n: number): boolean {
    if (this.held + n > this.limit) return false;
    this.held += n;
    return true;
  }

  release(n: number): void {
    this.held -= n;
  }
}
