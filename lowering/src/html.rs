//! What nnpc's self-contained web pages share (the dependency graph's, and `nnpc diff
//! --report`'s in `nnp-runtime`): text escaped for HTML, JSON embedded in a page, and the
//! page's frame. A page loads nothing: its CSS, SVG and script are inline, so it opens
//! offline and in a code review, and no resource names a network address.

/// `s` as HTML text or an attribute value: `&`, `<`, `>`, `"` and `'` escaped, so firmware
/// text (names, comments, source lines) cannot open an element or end an attribute.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// JSON text made safe inside a `<script type="application/json">` element: every `<` (only
/// ever inside a JSON string) written `\u003c`, so no `</script>` in a name ends the element.
pub fn script_json(json: &str) -> String {
    json.replace('<', "\\u003c")
}

/// The page's own error catcher, first in the page: an error of any later script is written
/// into `#nnpc-errors` (which the browser tests read) and shown.
const ERRORS: &str = "<div id=\"nnpc-errors\" hidden></div>\n<script>window.onerror=function(m,s,l,c){var e=document.getElementById('nnpc-errors');e.hidden=false;e.textContent+='script error: '+m+' (line '+l+':'+c+')\\n';};</script>\n";

/// Style both pages share.
const BASE_CSS: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:0;color:#1b1b1b;background:#fff}\
code,pre,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}\
#nnpc-errors{white-space:pre;background:#fdd;color:#900;padding:4px 8px}\
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}\
th{background:#f3f3f3}";

/// A whole page: `title` (escaped here), the page's own `css`, its `body` (already HTML) and
/// its `script` (run after the body; empty for none).
pub fn page(title: &str, css: &str, body: &str, script: &str) -> String {
    let mut out = String::with_capacity(body.len() + script.len() + css.len() + 1024);
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    out.push_str("<meta name=\"generator\" content=\"nnpc\">\n<title>");
    out.push_str(&escape(title));
    out.push_str("</title>\n<style>");
    out.push_str(BASE_CSS);
    out.push_str(css);
    out.push_str("</style>\n</head>\n<body>\n");
    out.push_str(ERRORS);
    out.push_str(body);
    if !script.is_empty() {
        out.push_str("\n<script>\n");
        out.push_str(script);
        out.push_str("\n</script>");
    }
    out.push_str("\n</body>\n</html>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_by_hand() {
        assert_eq!(
            escape(r#"<script>alert("x")</script> & 'y'"#),
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39;"
        );
        assert_eq!(
            script_json(r#"{"a":"</script>"}"#),
            r#"{"a":"\u003c/script>"}"#
        );
    }

    #[test]
    fn page_escapes_its_title() {
        let p = page("a<b", "", "<p>x</p>", "");
        assert!(p.contains("<title>a&lt;b</title>"));
        assert!(!p.contains("<script>\n\n</script>"));
    }
}
