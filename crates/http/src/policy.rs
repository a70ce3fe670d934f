//! An oslo.policy-compatible policy engine.
//!
//! Check strings: `@` (always), `!` (never), `role:NAME`, `rule:NAME`,
//! `KEY:VALUE` generic checks where VALUE may be `%(target_key)s` or a
//! literal (`is_admin:True` tests the admin role), combined with `and`,
//! `or`, `not` and parentheses. Each API brings its rule table (upstream's
//! rule names and defaults); a rule in the policy file replaces the
//! default as written. Every rule berth serves is project scoped, so a
//! system-scoped caller is refused whatever the rule says (oslo.policy
//! scope check).

use std::collections::{BTreeMap, HashMap};

use crate::auth::AuthContext;

/// A rule table: `(name, new default, deprecated default)`. With a
/// deprecated default the rule is `(new) or (deprecated)`, as oslo.policy
/// evaluates it when `enforce_new_defaults` is off.
pub type RuleTable = [(&'static str, &'static str, Option<&'static str>)];

/// A parsed check string.
#[derive(Debug, Clone, PartialEq)]
pub enum Check {
    /// `@` or empty: always passes.
    Always,
    /// `!`: never passes.
    Never,
    /// `role:NAME` (case-insensitive).
    Role(String),
    /// `rule:NAME`.
    Rule(String),
    /// `KEY:VALUE`: a credential attribute compared with a literal or a
    /// `%(target_key)s` substitution.
    Generic(String, String),
    /// All must pass.
    And(Vec<Check>),
    /// Any must pass.
    Or(Vec<Check>),
    /// Negation.
    Not(Box<Check>),
}

/// Error parsing a check string.
#[derive(Debug, thiserror::Error)]
#[error("invalid policy check string {0:?}")]
pub struct PolicyParseError(pub String);

/// The loaded policy: every rule name -> check.
#[derive(Debug, Clone)]
pub struct Policy {
    rules: HashMap<String, Check>,
}

/// What a rule is checked against (placement passes project and user).
#[derive(Debug, Clone, Default)]
pub struct Target {
    /// Values available to `%(key)s` substitutions.
    pub values: BTreeMap<String, String>,
}

impl Target {
    /// The default placement target: the caller's own project and user.
    pub fn for_caller(ctx: &AuthContext) -> Self {
        let mut values = BTreeMap::new();
        if let Some(p) = &ctx.project_id {
            values.insert("project_id".to_owned(), p.clone());
        }
        if let Some(u) = &ctx.user_id {
            values.insert("user_id".to_owned(), u.clone());
        }
        Self { values }
    }
}

impl Policy {
    /// The `defaults` table overridden by `overrides` (rule name -> check
    /// string, as read from a policy file).
    pub fn new(defaults: &RuleTable, overrides: &BTreeMap<String, String>) -> Result<Self, PolicyParseError> {
        let mut rules = HashMap::new();
        for (name, new, deprecated) in defaults {
            let text = match deprecated {
                Some(old) => format!("({new}) or ({old})"),
                None => (*new).to_owned(),
            };
            rules.insert((*name).to_owned(), parse(&text)?);
        }
        for (name, text) in overrides {
            rules.insert(name.clone(), parse(text)?);
        }
        Ok(Self { rules })
    }

    /// Parse a YAML or JSON policy file body (a mapping of strings) into
    /// overrides.
    pub fn overrides_from_text(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
        Ok(if text.trim().is_empty() {
            BTreeMap::new()
        } else {
            serde_yaml::from_str::<Option<BTreeMap<String, String>>>(text)?.unwrap_or_default()
        })
    }

    /// Does `rule` allow `ctx` to act on `target`?
    pub fn allows(&self, rule: &str, ctx: &AuthContext, target: &Target) -> bool {
        if ctx.system_scope {
            return false;
        }
        match self.rules.get(rule) {
            Some(check) => self.eval(check, ctx, target, 0),
            // oslo.policy falls back to the "default" rule, which placement
            // does not define: unknown rules are denied.
            None => false,
        }
    }

    fn eval(&self, check: &Check, ctx: &AuthContext, target: &Target, depth: u32) -> bool {
        if depth > 32 {
            return false;
        }
        match check {
            Check::Always => true,
            Check::Never => false,
            Check::Role(role) => ctx.roles.iter().any(|r| r.eq_ignore_ascii_case(role)),
            Check::Rule(name) => self.rules.get(name).is_some_and(|c| self.eval(c, ctx, target, depth + 1)),
            Check::Generic(key, value) => {
                let expected = if let Some(inner) = value.strip_prefix("%(").and_then(|v| v.strip_suffix(")s")) {
                    match target.values.get(inner) {
                        Some(v) => v.clone(),
                        None => return false,
                    }
                } else {
                    value.trim_matches(|c| c == '\'' || c == '"').to_owned()
                };
                let actual = match key.as_str() {
                    "project_id" | "tenant" | "tenant_id" => ctx.project_id.clone(),
                    "user_id" | "user" => ctx.user_id.clone(),
                    "is_admin" => {
                        Some(if ctx.roles.iter().any(|r| r == "admin") { "True" } else { "False" }.to_owned())
                    }
                    _ => None,
                };
                actual.is_some_and(|a| a == expected)
            }
            Check::And(items) => items.iter().all(|c| self.eval(c, ctx, target, depth + 1)),
            Check::Or(items) => items.iter().any(|c| self.eval(c, ctx, target, depth + 1)),
            Check::Not(inner) => !self.eval(inner, ctx, target, depth + 1),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Open,
    Close,
    And,
    Or,
    Not,
    Atom(String),
}

fn tokenize(text: &str) -> Vec<Token> {
    let mut tokens = Vec::new();
    for word in text.split_whitespace() {
        let mut word = word;
        while let Some(rest) = word.strip_prefix('(') {
            tokens.push(Token::Open);
            word = rest;
        }
        let mut closes = 0;
        while let Some(rest) = word.strip_suffix(')') {
            // `%(project_id)s` ends in `s`, so a trailing `)` is a paren.
            closes += 1;
            word = rest;
        }
        if !word.is_empty() {
            tokens.push(match word.to_ascii_lowercase().as_str() {
                "and" => Token::And,
                "or" => Token::Or,
                "not" => Token::Not,
                _ => Token::Atom(word.to_owned()),
            });
        }
        tokens.extend(std::iter::repeat_n(Token::Close, closes));
    }
    tokens
}

/// Parse an oslo.policy check string.
pub fn parse(text: &str) -> Result<Check, PolicyParseError> {
    let tokens = tokenize(text);
    if tokens.is_empty() {
        return Ok(Check::Always);
    }
    let mut pos = 0;
    let check = parse_or(&tokens, &mut pos).ok_or_else(|| PolicyParseError(text.to_owned()))?;
    if pos != tokens.len() {
        return Err(PolicyParseError(text.to_owned()));
    }
    Ok(check)
}

fn parse_or(tokens: &[Token], pos: &mut usize) -> Option<Check> {
    let mut items = vec![parse_and(tokens, pos)?];
    while tokens.get(*pos) == Some(&Token::Or) {
        *pos += 1;
        items.push(parse_and(tokens, pos)?);
    }
    Some(if items.len() == 1 { items.pop()? } else { Check::Or(items) })
}

fn parse_and(tokens: &[Token], pos: &mut usize) -> Option<Check> {
    let mut items = vec![parse_not(tokens, pos)?];
    while tokens.get(*pos) == Some(&Token::And) {
        *pos += 1;
        items.push(parse_not(tokens, pos)?);
    }
    Some(if items.len() == 1 { items.pop()? } else { Check::And(items) })
}

fn parse_not(tokens: &[Token], pos: &mut usize) -> Option<Check> {
    if tokens.get(*pos) == Some(&Token::Not) {
        *pos += 1;
        return Some(Check::Not(Box::new(parse_not(tokens, pos)?)));
    }
    match tokens.get(*pos)? {
        Token::Open => {
            *pos += 1;
            let inner = parse_or(tokens, pos)?;
            if tokens.get(*pos) != Some(&Token::Close) {
                return None;
            }
            *pos += 1;
            Some(inner)
        }
        Token::Atom(atom) => {
            *pos += 1;
            Some(match atom.as_str() {
                "@" => Check::Always,
                "!" => Check::Never,
                _ => {
                    let (kind, value) = atom.split_once(':')?;
                    match kind {
                        "role" => Check::Role(value.to_owned()),
                        "rule" => Check::Rule(value.to_owned()),
                        _ => Check::Generic(kind.to_owned(), value.to_owned()),
                    }
                }
            })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(roles: &[&str], project: &str) -> AuthContext {
        AuthContext {
            user_id: Some("u".into()),
            project_id: Some(project.into()),
            roles: roles.iter().map(|r| r.to_string()).collect(),
            system_scope: false,
            is_admin_project: true,
        }
    }

    const RULES: &RuleTable = &[
        ("admin_api", "role:admin", None),
        ("service_api", "role:service", Some("role:admin")),
        ("admin_or_service_api", "role:admin or role:service", Some("role:admin")),
        ("project_reader_api", "role:reader and project_id:%(project_id)s", Some("role:admin")),
        (
            "admin_or_project_reader_or_service_api",
            "role:admin or rule:project_reader_api or role:service",
            Some("role:admin"),
        ),
        ("placement:resource_providers:list", "rule:admin_or_service_api", None),
        ("placement:usages", "rule:admin_or_project_reader_or_service_api", None),
        ("placement:reshaper:reshape", "rule:service_api", None),
        ("nova_admin", "is_admin:True", None),
    ];

    #[test]
    fn legacy_defaults() {
        let policy = Policy::new(RULES, &BTreeMap::new()).unwrap();
        let t = Target::default();
        assert!(policy.allows("placement:reshaper:reshape", &ctx(&["admin"], "p"), &t));
        assert!(policy.allows("placement:reshaper:reshape", &ctx(&["service"], "p"), &t));
        assert!(!policy.allows("placement:resource_providers:list", &ctx(&["member"], "p"), &t));
        let mut system = ctx(&["admin"], "p");
        system.system_scope = true;
        assert!(!policy.allows("placement:resource_providers:list", &system, &t));
    }

    #[test]
    fn is_admin_checks_the_admin_role() {
        let policy = Policy::new(RULES, &BTreeMap::new()).unwrap();
        let t = Target::default();
        assert!(policy.allows("nova_admin", &ctx(&["admin"], "p"), &t));
        assert!(!policy.allows("nova_admin", &ctx(&["member"], "p"), &t));
    }

    #[test]
    fn project_reader_matches_target() {
        let policy = Policy::new(RULES, &BTreeMap::new()).unwrap();
        let mut target = Target::default();
        target.values.insert("project_id".into(), "p1".into());
        assert!(policy.allows("placement:usages", &ctx(&["reader"], "p1"), &target));
        assert!(!policy.allows("placement:usages", &ctx(&["reader"], "p2"), &target));
    }

    #[test]
    fn parses_nested_expressions() {
        assert_eq!(
            parse("(role:a or role:b) and not rule:c").unwrap(),
            Check::And(vec![
                Check::Or(vec![Check::Role("a".into()), Check::Role("b".into())]),
                Check::Not(Box::new(Check::Rule("c".into())))
            ])
        );
        assert!(parse("(role:a").is_err());
        assert_eq!(parse("").unwrap(), Check::Always);
    }
}
