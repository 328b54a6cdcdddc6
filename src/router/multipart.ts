/**
 * Finds one small text field (e.g. `model`) in a buffered multipart/form-data body without
 * copying the file parts. Returns undefined when the body or boundary is malformed.
 */
export function multipartField(body: Buffer, contentType: string, name: string): string | undefined {
  const at = fieldRange(body, contentType, name);
  return at && body.subarray(at.start, at.end).toString('utf8');
}

/** The body with one small text field's value replaced, or undefined when the field is not found. */
export function replaceMultipartField(
  body: Buffer,
  contentType: string,
  name: string,
  value: string,
): Buffer | undefined {
  const at = fieldRange(body, contentType, name);
  return at && Buffer.concat([body.subarray(0, at.start), Buffer.from(value, 'utf8'), body.subarray(at.end)]);
}

/**
 * Where the value of a small text field lies in the body (byte offsets). Read strictly, so
 * that an engine's form parser cannot find another value than the router: undefined when
 * the content type names its boundary more than once, a delimiter is not at a line start or
 * not ended by its line, a part has more than one Content-Disposition or names itself more
 * than once (`name=`, `name*=`), or the field is sent twice (an engine may read the other
 * copy) or as a file.
 */
function fieldRange(body: Buffer, contentType: string, name: string): { start: number; end: number } | undefined {
  const boundary = boundaryOf(contentType);
  if (boundary === undefined) return undefined;
  const delim = Buffer.from(`--${boundary}`);
  // The body starts with its first delimiter (no preamble: no client sends one), and the
  // boundary occurs nowhere but at the start of a line (RFC 2046 5.1.1: it must not appear in
  // any part); a parser that also takes it elsewhere would see other parts.
  if (!body.subarray(0, delim.length).equals(delim)) return undefined;
  for (let at = body.indexOf(delim, 1); at >= 0; at = body.indexOf(delim, at + 1)) {
    if (body[at - 2] !== 0x0d || body[at - 1] !== 0x0a) return undefined;
  }
  const lineDelim = Buffer.from(`\r\n--${boundary}`);
  let pos = 0;
  let found: { start: number; end: number } | undefined;
  for (;;) {
    let start = pos + delim.length;
    if (body[start] === 0x2d && body[start + 1] === 0x2d) return found; // closing delimiter
    // The delimiter's line ends after optional transport padding.
    while ((body[start] === 0x20 || body[start] === 0x09) && start - pos < delim.length + 64) start++;
    if (body[start] !== 0x0d || body[start + 1] !== 0x0a) return undefined;
    start += 2;
    const headerEnd = body[start] === 0x0d && body[start + 1] === 0x0a ? start - 2 : body.indexOf('\r\n\r\n', start);
    if (headerEnd < 0) return undefined;
    // A part's headers are short; longer ones are not a form any client sends.
    if (headerEnd - start > 16 * 1024) return undefined;
    const next = body.indexOf(lineDelim, headerEnd + 4);
    if (next < 0) return undefined;
    const headers = headerEnd > start ? body.subarray(start, headerEnd).toString('latin1') : '';
    const lines = headers.split('\r\n');
    // A folded header (a line that starts with a space or tab) continues the one before it
    // for some parsers and not for others.
    if (lines.some((l) => l.startsWith(' ') || l.startsWith('\t'))) return undefined;
    const dispositions = lines.filter((l) => /^content-disposition\s*:/i.test(l));
    if (dispositions.length > 1) return undefined;
    // `name="model"`, `name = "model"` and `name=model` all name the field (parsers differ); a
    // second name, or an encoded `name*=` (no client sends one), could name another.
    const names =
      dispositions.length === 1 ? [...dispositions[0]!.matchAll(/[;\s]name(\*?)\s*=\s*(?:"([^"]*)"|([^;\s]+))/gi)] : [];
    if (names.length > 1 || names.some((n) => n[1] === '*')) return undefined;
    const partName = names.length === 1 ? (names[0]![2] ?? names[0]![3]) : undefined;
    if (partName === name) {
      if (found || /filename\*?\s*=/i.test(headers)) return undefined;
      const end = next; // the CRLF before the next delimiter
      if (end - (headerEnd + 4) > 1024) return undefined;
      found = { start: headerEnd + 4, end: Math.max(headerEnd + 4, end) };
    }
    pos = next + 2;
  }
}

/**
 * The one `boundary` parameter of a multipart content type (1-70 characters, quoted or a
 * token), or undefined when there is none, more than one, an encoded `boundary*`, or one
 * that does not end where a parameter ends (a parser could read another boundary there).
 */
function boundaryOf(contentType: string): string | undefined {
  if (/;\s*boundary\s*\*/i.test(contentType)) return undefined;
  // What follows the value is looked at, not consumed: the next parameter's `;` starts it.
  const found = [...contentType.matchAll(/;\s*boundary\s*=\s*(?:"([^"]*)"|([^\s;"]*))\s*(?=(;|$|[\s\S]))/gi)];
  if (found.length !== 1) return undefined;
  const [, quoted, token, after] = found[0]!;
  if (after !== ';' && after !== '') return undefined;
  const value = quoted ?? token ?? '';
  return value.length >= 1 && value.length <= 70 ? value : undefined;
}
