/**
 * Finds one small text field (e.g. `model`) in a buffered multipart/form-data body without
 * copying the file parts. Returns undefined when the body or boundary is malformed.
 */
export function multipartField(body: Buffer, contentType: string, name: string): string | undefined {
  const at = fieldRange(body, contentType, name);
  return at && body.subarray(at.start, at.end).toString('utf8');
}

/** The body with one small text field's value replaced, or undefined when the field is not found. */
export function replaceMultipartField(body: Buffer, contentType: string, name: string, value: string): Buffer | undefined {
  const at = fieldRange(body, contentType, name);
  return at && Buffer.concat([body.subarray(0, at.start), Buffer.from(value, 'utf8'), body.subarray(at.end)]);
}

/**
 * Where the value of a small text field lies in the body (byte offsets). A field sent twice
 * (any part of that name after the first) is undefined too: an engine may read the other copy.
 */
function fieldRange(body: Buffer, contentType: string, name: string): { start: number; end: number } | undefined {
  const m = /boundary=(?:"([^"]{1,70})"|([^\s;]{1,70}))/i.exec(contentType);
  const boundary = m?.[1] ?? m?.[2];
  if (!boundary) return undefined;
  const delim = Buffer.from(`--${boundary}`);
  let pos = body.indexOf(delim);
  let found: { start: number; end: number } | undefined;
  while (pos >= 0) {
    const start = pos + delim.length;
    if (body[start] === 0x2d && body[start + 1] === 0x2d) return found; // closing delimiter
    const headerEnd = body.indexOf('\r\n\r\n', start);
    if (headerEnd < 0) return undefined;
    const next = body.indexOf(delim, headerEnd + 4);
    if (next < 0) return undefined;
    // A part's headers are short; longer ones are not a form any client sends.
    if (headerEnd - start > 16 * 1024) return undefined;
    const headers = body.subarray(start, headerEnd).toString('latin1');
    // `name="model"`, `name = "model"` and `name=model` all name the field (parsers differ).
    const disp = /content-disposition:[^\r\n]*?[;\s]name\s*=\s*(?:"([^"]*)"|([^;\s]+))/i.exec(headers);
    if ((disp?.[1] ?? disp?.[2]) === name) {
      if (found || /filename=/i.test(headers)) return undefined;
      const end = next - 2; // the CRLF before the next delimiter
      if (end - (headerEnd + 4) > 1024) return undefined;
      found = { start: headerEnd + 4, end: Math.max(headerEnd + 4, end) };
    }
    pos = next;
  }
  return undefined;
}
