// Template variables in a CEL filter. Grafana's own formats are not CEL:
// a value like `a" || true || "` would end the string literal and change
// the filter. Here every value becomes a CEL literal, or the escaped inside
// of the literal it stands in, so no value can ever change the filter's
// structure.
//
//   slurm.job.id == $job        one value  -> == "1234"
//                               several    -> in ["1234", "1235"]
//   slurm.job.id in $job        always a list: in ["1234"]
//   slurm.job.name == "x-$job"  the value escaped inside the literal;
//                               several are joined with ","
//   r"$job"                     raw strings cannot escape: left as is
//
// Explicit formats (${job:json}, ${job:raw}) are ignored for the same
// reason: the filter always gets CEL escaping.

/** Resolves a variable reference like "$job" to its value(s), or undefined if it is not a variable. */
export type Resolve = (ref: string) => string | string[] | undefined;

// A variable reference as Grafana spells them: $name, ${name}, ${name:fmt},
// ${name.field}, [[name]] and [[name:fmt]].
const VAR = /\$([A-Za-z_][A-Za-z0-9_]*)|\$\{([A-Za-z_][A-Za-z0-9_.]*)(?::[^}]*)?\}|\[\[([A-Za-z_][A-Za-z0-9_.]*)(?::[^\]]*)?\]\]/y;

/** quote returns s as a CEL double-quoted string literal. */
export function quote(s: string): string {
  return '"' + escapeInside(s, '"') + '"';
}

/** escapeInside escapes s for the inside of a CEL literal delimited by q. */
export function escapeInside(s: string, q: string): string {
  let out = '';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '\\') {
      out += '\\\\';
    } else if (ch === q || ch === '"' || ch === "'") {
      out += '\\' + ch;
    } else if (ch === '\n') {
      out += '\\n';
    } else if (ch === '\r') {
      out += '\\r';
    } else if (ch === '\t') {
      out += '\\t';
    } else if (c < 0x20 || c === 0x7f) {
      out += '\\x' + c.toString(16).padStart(2, '0');
    } else if (c >= 0xd800 && c <= 0xdfff) {
      // A lone surrogate has no code point CEL accepts: the replacement
      // character keeps the value a valid (non-matching) string.
      out += '\uFFFD';
    } else {
      out += ch;
    }
  }
  return out;
}

function list(values: string[]): string {
  return '[' + values.map(quote).join(', ') + ']';
}

interface Literal {
  start: number; // index of the opening quote (or prefix)
  end: number; // index just past the closing quote
  quote: string; // ", ', """ or '''
  raw: boolean;
}

// scanLiteral reads the CEL string literal starting at i, if any.
function scanLiteral(src: string, i: number): Literal | undefined {
  let j = i;
  let raw = false;
  const c0 = src[j];
  if ((c0 === 'r' || c0 === 'R') && (src[j + 1] === '"' || src[j + 1] === "'")) {
    // r"..." only when r is not the end of an identifier (e.g. `attr"` is
    // not a raw string, but nothing valid has that shape anyway).
    const prev = i > 0 ? src[i - 1] : '';
    if (!/[A-Za-z0-9_.]/.test(prev)) {
      raw = true;
      j++;
    }
  }
  const q1 = src[j];
  if (q1 !== '"' && q1 !== "'") {
    return undefined;
  }
  const triple = src.startsWith(q1.repeat(3), j);
  const q = triple ? q1.repeat(3) : q1;
  let k = j + q.length;
  while (k < src.length) {
    if (!raw && src[k] === '\\') {
      k += 2;
      continue;
    }
    if (src.startsWith(q, k)) {
      return { start: i, end: k + q.length, quote: q, raw };
    }
    if (!triple && src[k] === '\n') {
      break; // unterminated: CEL rejects it; stop at the line end
    }
    k++;
  }
  return { start: i, end: src.length, quote: q, raw };
}

/**
 * rewrite walks a filter outside its string literals: each literal goes to
 * onLiteral, each variable reference to onVariable with the output so far;
 * what they return replaces them (onVariable may also rewrite the output
 * before the reference, as `==` becoming `in` needs).
 */
function rewrite(
  src: string,
  onLiteral: (text: string, lit: Literal) => string,
  onVariable: (ref: string, before: string) => string
): string {
  let out = '';
  let i = 0;
  while (i < src.length) {
    const lit = scanLiteral(src, i);
    if (lit) {
      out += onLiteral(src.slice(lit.start, lit.end), lit);
      i = lit.end;
      continue;
    }
    VAR.lastIndex = i;
    const m = VAR.exec(src);
    if (!m) {
      out += src[i];
      i++;
      continue;
    }
    out = onVariable(m[0], out);
    i += m[0].length;
  }
  return out;
}

/**
 * interpolate replaces the variables in a CEL filter with CEL literals.
 * resolve is called with each reference as written ("$job", "${job}", ...)
 * and returns undefined for anything that is not a variable, which is then
 * left untouched.
 */
export function interpolate(src: string, resolve: Resolve): string {
  return rewrite(
    src,
    (text, lit) => interpolateLiteral(text, lit, resolve),
    (ref, out) => {
      const value = resolve(ref);
      if (value === undefined) {
        return out + ref;
      }
      const values = Array.isArray(value) ? value : [value];
      const several = Array.isArray(value) && values.length !== 1;
      const op = /(==|!=|\bin)\s*$/.exec(out);
      if (op && op[1] === 'in') {
        return out + list(values);
      }
      if (op && op[1] === '==' && several) {
        const head = out.slice(0, op.index);
        return head + (/\s$/.test(head) ? '' : ' ') + 'in ' + list(values);
      }
      if (op && op[1] === '!=' && several) {
        // x != [a, b] would be a type error; "none of them" is what is meant.
        const lhs = /([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)\s*!=\s*$/.exec(out);
        if (lhs) {
          return out.slice(0, lhs.index) + '!(' + lhs[1] + ' in ' + list(values) + ')';
        }
        return out + list(values); // the backend reports the type error
      }
      return out + (several ? list(values) : quote(values[0] ?? ''));
    }
  );
}

function interpolateLiteral(text: string, lit: Literal, resolve: Resolve): string {
  if (lit.raw) {
    return text;
  }
  const open = lit.quote.length;
  const closed = text.endsWith(lit.quote) && text.length >= 2 * open;
  const body = text.slice(open, closed ? text.length - open : text.length);
  let out = '';
  let i = 0;
  while (i < body.length) {
    if (body[i] === '\\') {
      out += body.slice(i, i + 2);
      i += 2;
      continue;
    }
    VAR.lastIndex = i;
    const m = VAR.exec(body);
    const value = m ? resolve(m[0]) : undefined;
    if (!m || value === undefined) {
      out += body[i];
      i++;
      continue;
    }
    const values = Array.isArray(value) ? value : [value];
    out += escapeInside(values.join(','), lit.quote[0]);
    i += m[0].length;
  }
  return text.slice(0, open) + out + (closed ? lit.quote : '');
}

/**
 * maskVariables replaces each variable reference outside string literals
 * with a literal of the same length (a list after `in`, else a string), so
 * that the backend can validate a filter that still holds `$job` and every
 * other issue keeps its line and column. References are ASCII, so lengths
 * in code points and in UTF-16 units agree.
 */
export function maskVariables(src: string): string {
  return rewrite(
    src,
    (text) => text,
    (ref, out) => {
      const n = ref.length;
      if (/\bin\s*$/.test(out)) {
        return out + (n >= 4 ? '[""' + ' '.repeat(n - 4) + ']' : '[' + ' '.repeat(n - 2) + ']');
      }
      return out + '"' + 'x'.repeat(n - 2) + '"';
    }
  );
}
