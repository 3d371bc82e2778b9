// Text helpers for the CEL filter field: where the backend's issues sit in
// the editor's text, and what the user is typing at the cursor. Pure
// functions over strings; the backend stays the one judge of validity.

/**
 * indexOf converts an issue's position (1-based line, 1-based column in
 * Unicode code points, as the backend and CEL count) into a UTF-16 index
 * into text, as the browser counts. Positions past the end clamp to it.
 */
export function indexOf(text: string, line: number, column: number): number {
  let i = 0;
  for (let l = 1; l < line; l++) {
    const nl = text.indexOf('\n', i);
    if (nl < 0) {
      return text.length;
    }
    i = nl + 1;
  }
  for (let c = 1; c < column && i < text.length; c++) {
    if (text[i] === '\n') {
      break;
    }
    const cp = text.codePointAt(i)!;
    i += cp > 0xffff ? 2 : 1;
  }
  return i;
}

/** span is the extent to underline for an issue starting at i: the name, literal or token there. */
export function span(text: string, i: number): [number, number] {
  if (i >= text.length) {
    return [text.length, text.length];
  }
  const rest = text.slice(i);
  const m =
    /^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*/.exec(rest) ??
    /^"(?:[^"\\\n]|\\.)*"?/.exec(rest) ??
    /^'(?:[^'\\\n]|\\.)*'?/.exec(rest) ??
    /^[0-9]+(?:\.[0-9]+)?/.exec(rest) ??
    /^(?:==|!=|&&|\|\||<=|>=)/.exec(rest);
  if (m && m[0].length > 0) {
    return [i, i + m[0].length];
  }
  const cp = text.codePointAt(i)!;
  return [i, i + (cp > 0xffff ? 2 : 1)];
}

/** What the cursor is in the middle of, for suggestions. */
export type Completion =
  | { kind: 'attribute'; prefix: string; from: number; to: number }
  | { kind: 'value'; attribute: string; prefix: string; from: number; to: number; quoted: boolean; quote: string }
  | { kind: 'none' };

interface Str {
  start: number; // the opening quote
  end: number; // past the closing quote, or text.length if unclosed
  closed: boolean;
  quote: string;
}

// strings lists the string literals of text (single-line, " or ').
function strings(text: string): Str[] {
  const out: Str[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i];
    if (c !== '"' && c !== "'") {
      i++;
      continue;
    }
    let k = i + 1;
    let closed = false;
    while (k < text.length && text[k] !== '\n') {
      if (text[k] === '\\') {
        k += 2;
        continue;
      }
      if (text[k] === c) {
        closed = true;
        k++;
        break;
      }
      k++;
    }
    out.push({ start: i, end: Math.min(k, text.length), closed, quote: c });
    i = Math.min(k, text.length);
  }
  return out;
}

const NAME = /[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*\.?$/;

// comparedAttribute finds the attribute a value at the end of before is
// compared with: `attr == `, `attr != `, `attr in [..., `, or
// `attr.startsWith(` / endsWith / contains. Regular expressions (matches)
// get no value suggestions: a value is not a pattern.
function comparedAttribute(before: string): string | undefined {
  const patterns = [
    /([A-Za-z_][A-Za-z0-9_.]*)\s*(?:==|!=)\s*$/,
    /([A-Za-z_][A-Za-z0-9_.]*)\s+in\s*\[(?:\s*(?:"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')\s*,)*\s*$/,
    /([A-Za-z_][A-Za-z0-9_.]*)\.(?:startsWith|endsWith|contains)\(\s*$/,
  ];
  for (const p of patterns) {
    const m = p.exec(before);
    if (m) {
      return m[1];
    }
  }
  return undefined;
}

/** completionAt says what is being typed at cursor. */
export function completionAt(text: string, cursor: number): Completion {
  const lit = strings(text).find((s) => s.start < cursor && (cursor < s.end || (!s.closed && cursor <= s.end)));
  if (lit) {
    const attribute = comparedAttribute(text.slice(0, lit.start));
    if (!attribute) {
      return { kind: 'none' };
    }
    const to = lit.closed ? lit.end - 1 : lit.end;
    return {
      kind: 'value',
      attribute,
      prefix: unescape(text.slice(lit.start + 1, cursor)),
      from: lit.start + 1,
      to,
      quoted: true,
      quote: lit.quote,
    };
  }
  const before = text.slice(0, cursor);
  const m = NAME.exec(before);
  if (m) {
    // A word right after a quote or digit is not a name being typed.
    const prev = before[m.index - 1];
    if (prev && /[0-9"']/.test(prev)) {
      return { kind: 'none' };
    }
    let to = cursor;
    while (to < text.length && /[A-Za-z0-9_.]/.test(text[to])) {
      to++;
    }
    return { kind: 'attribute', prefix: m[0], from: m.index, to };
  }
  const attribute = comparedAttribute(before);
  if (attribute) {
    return { kind: 'value', attribute, prefix: '', from: cursor, to: cursor, quoted: false, quote: '"' };
  }
  return { kind: 'none' };
}

// unescape reads the common escapes of a CEL literal's inside, enough to
// filter suggestions by what was typed.
function unescape(s: string): string {
  return s.replace(/\\(.)/g, (_m, c: string) => ({ n: '\n', t: '\t', r: '\r' })[c] ?? c);
}

/** The functions a filter may call, offered with attribute names. */
export const functions = ['matches', 'startsWith', 'endsWith', 'contains'];
