"""Website management: change requests against a small CMS behind admin tools.

Services: a CMS with pages (hierarchical slugs, status, body with markdown links, SEO metadata),
redirects, menus (main and footer), a media library, and the report of the last link crawl. Each
instance is one change request: rename a page (with redirects), fix the broken links listed in the
crawl report, or reorganise the main menu. The checker compares the final CMS state with the state
the change request requires and reports per requirement. The package: `world` (generation), `env`
(services and tools), `plan` (the reference solution as steps), `checker` (the grader),
`handbook.md` (the domain documentation).
"""

from __future__ import annotations

from typing import Any

from coevolve.tasks.base import Concept, Constraint, DomainFact, Knowledge, PlanStep, TaskEnv, TaskFamily
from coevolve.tasks.website.checker import check, snapshot
from coevolve.tasks.website.env import HELPER_TOOLS, TOOLS, WebsiteEnv
from coevolve.tasks.website.plan import plan, solve_links, solve_menu, solve_rename
from coevolve.tasks.website.world import Page, SiteWorld, build_world, slugify
from coevolve.values import Outcome, TaskInstance, ToolSpec

__all__ = [
    "Page",
    "SiteWorld",
    "WebsiteEnv",
    "WebsiteFamily",
    "slugify",
    "snapshot",
    "solve_links",
    "solve_menu",
    "solve_rename",
]


class WebsiteFamily(TaskFamily):
    name = "website"
    title = "website management"
    facts = (
        DomainFact(
            "permanent_301",
            "A page that has moved for good gets a 301 (permanent) redirect; 302 is only for temporary moves.",
            Concept((
                ("301", "permanent redirect", "permanently redirect", "redirect permanently", "redirect it permanently",
                 "redirect them permanently"),
                ("for good", "move", "moving", "renam", "relocat", "new address", "new url",
                 "new location", "address changes", "url changes", "not coming back", "isn't coming back"),
            )),
            common=True,
            reversals=(
                # a permanent move takes a 302
                Concept(
                    (
                        ("use a 302", "use 302", "give it a 302", "gets a 302", "get a 302", "with a 302",
                         "302 for", "302 redirect for", "302 is right for", "302 is correct for",
                         "302 is the right"),
                        ("permanent", "for good", "moved", "renam", "every", "all ", "always", "any "),
                    ),
                    unless=("301", "temporar", "only", "come back", "coming back", "will return"),
                ),
                # a 301 is not needed
                Concept((
                    ("301",),
                    ("not needed", "unnecessary", "isn't needed", "is not needed", "not required",
                     "isn't required", "overkill"),
                )),
            ),
        ),
        DomainFact(
            "resolve_redirects",
            "A link or menu item that only reaches its page through a redirect counts as broken: point it "
            "straight at the final live page, following redirect chains (A -> B -> C) to the end, and when a "
            "page moves, re-point existing redirects to it so that no redirect chain is created.",
            Concept((
                ("redirect",),
                ("link", "menu", "navigation", "href", "point", "retarget", "aim"),
                ("final", "straight", "direct", "chain", "end of", "its end", "to the end", "hop",
                 "ultimate", "all the way", "whole way", "last live", "last page", "without any redirect",
                 "without a redirect", "not via", "never via", "not through", "never through"),
            )),
            reversals=(
                # links through a redirect are fine
                Concept(
                    (
                        ("redirect",),
                        ("fine", "ok", "okay", "acceptable", "good enough", "works", "not broken",
                         "isn't broken", "aren't broken", "are not broken", "is not broken", "leave",
                         "no need", "don't need", "do not need", "doesn't need", "does not need",
                         "harmless", "as they are", "as it is", "as is"),
                        ("link", "menu", "navigation", "href"),
                    ),
                    unless=("final", "straight", "direct", "end of the chain", "last page", "live page"),
                ),
            ),
        ),
        DomainFact(
            "child_pages",
            "Page URLs are hierarchical: renaming a page also moves every child page (/parent/child), so each "
            "child's old URL needs its own 301 and the links to it must be updated too.",
            Concept((
                ("child", "sub-page", "subpage", "sub page", "descendant", "nested page", "pages beneath",
                 "pages below", "pages under", "beneath it", "below it", "under it"),
                ("renam", "move", "moving", "slug", "relocat", "cascad"),
                ("redirect", "301", "link"),
            )),
            reversals=(
                # child pages keep their URLs
                Concept((
                    ("child", "sub-page", "subpage", "sub page", "nested page", "pages beneath",
                     "pages below", "pages under"),
                    ("keep their url", "keep their address", "keep their path", "keep the same url",
                     "keep their old url", "keep its url", "keeps its url", "stay where", "stay put",
                     "unaffected", "not affected", "aren't affected", "isn't affected", "unchanged",
                     "don't move", "do not move", "doesn't move", "does not move", "not move", "never move",
                     "need no redirect", "needs no redirect", "no redirect is needed",
                     "no redirects are needed", "need no 301", "needs no 301", "no 301 is needed",
                     "no need", "don't need", "do not need", "doesn't need", "does not need"),
                )),
            ),
        ),
        DomainFact(
            "seo_canonical",
            "A rename does not touch the SEO canonical URL: when a page's canonical URL is set to its old "
            "address, change it to the new one.",
            Concept((
                ("canonical",),
                ("renam", "slug", "move", "moving", "relocat", "new url", "new address", "new path"),
                ("old", "previous", "former", "stale", "outdated", "still", "by hand", "manual", "not updat",
                 "not chang", "not touch", "untouched", "unchanged", "not follow", "n't follow", "won't",
                 "isn't updat", "aren't updat", "remains", "leaves", "independent", "pre-rename"),
            )),
            rare=True,
            reversals=(
                # the canonical URL is left as it is
                Concept(
                    (
                        ("canonical",),
                        ("leave the", "leave it", "leave its", "keep the", "keep it", "keep its",
                         "no need to change", "no need to update", "don't change the", "do not change the",
                         "don't update the", "do not update the", "don't touch the", "do not touch the",
                         "never change the", "never touch the", "ignore the", "can stay", "may stay",
                         "can remain", "may remain", "needn't", "need not", "doesn't need", "does not need",
                         "don't need", "do not need", "automatically", "updates its canonical",
                         "updates the canonical", "follows the rename", "no action"),
                        ("renam", "old", "previous", "move", "slug"),
                    ),
                    unless=("to the new", "new address", "new url", "new one"),
                ),
            ),
        ),
        DomainFact(
            "no_drafts",
            "Draft pages are not public: never link or add a menu item to a draft page, even when its title "
            "matches; use the published page with that title.",
            Concept((
                ("draft", "unpublished", "not published"),
                ("link", "menu", "navigation", "point", "target", "href"),
                ("never", "not public", "publicly", "not visible", "invisible", "not live", "aren't live",
                 "isn't live", "avoid", "do not", "don't", "must not", "should not", "published", "skip",
                 "exclud", "instead", "only"),
            )),
            reversals=(
                # linking a draft is fine
                Concept(
                    (
                        ("draft", "unpublished"),
                        ("link", "menu", "navigation", "point", "target"),
                        ("fine", "ok", "okay", "allowed", "acceptable", "permitted", "can link", "may link",
                         "can be linked", "may be linked", "can add", "may add", "go ahead", "prefer",
                         "use the draft", "link to the draft", "link the draft", "pick the draft",
                         "choose the draft", "drafts too", "drafts as well", "including draft",
                         "not forbidden", "isn't forbidden", "not prohibited", "isn't prohibited",
                         "not banned", "regardless", "even a draft", "even if it is a draft",
                         "even if it's a draft", "whether it is a draft"),
                    ),
                    unless=("published",),
                ),
            ),
        ),
    )
    constraints = (
        Constraint(
            "seo_title",
            "When the request gives a new SEO title, the renamed page's seo_title is set to exactly that text.",
            Concept((
                ("seo title", "seo_title", "seo-title", "search title", "search engine title", "title tag"),
                ("request", "task", "ask", "given", "gives", "provid", "suppl", "specif", "ticket", "mention",
                 "names a", "includes a", "contains a"),
                ("set", "exact", "verbatim", "word for word", "character for character", "precise", "as written",
                 "as given", "copy", "use", "put", "update", "match", "must", "always", "apply", "fill"),
            )),
            reversals=(
                # the old SEO title stays
                Concept(
                    (
                        ("seo title", "seo_title", "seo-title", "title tag"),
                        ("keep the", "keep its", "keep their", "leave the", "leave its", "leave it",
                         "unchanged", "untouched", "as it is", "as is", "ignore the new",
                         "ignore the request", "no need to change", "no need to update", "don't change",
                         "do not change", "don't update", "do not update", "never change", "never update"),
                    ),
                    unless=("exact", "verbatim", "word for word", "set to", "set it", "replace"),
                ),
            ),
        ),
    )

    # ------------------------------------------------------------------ generation
    def build_world(self, seed: int, params: dict[str, Any]) -> SiteWorld:
        return build_world(seed, params)

    def instruction(self, world: SiteWorld, instance_id: str) -> str:
        w = world
        if w.kind == "rename":
            page = w.page(w.rename_id)
            old = w.path(page.id)
            new = old.rsplit("/", 1)[0] + "/" + w.new_slug
            seo = f' Also set its SEO title to "{w.seo_title}".' if w.seo_title else ""
            return (
                f'{w.site} website, change request: rename the page "{page.title}" (now at `{old}`) so that its '
                f"slug becomes `{w.new_slug}` and its URL `{new}`. Keep the old address working with a redirect, "
                f"and update every internal link and menu item that pointed at the old address.{seo} When you are "
                "done, no internal link on the site may be broken. Then call finish."
            )
        if w.kind == "links":
            return (
                f"{w.site} website, change request: the last link crawl found broken internal links (see the link "
                "report). Fix every reported link, wherever it appears, so that it leads to the page it was meant "
                "for (the link text names that page). Change nothing else. Then call finish."
            )
        ops = "\n".join(f"{i + 1}. {_op_text(op)}" for i, op in enumerate(w.menu_ops))
        return (
            f"{w.site} website, change request: reorganise the main menu.\n{ops}\n"
            "Keep every other item and its position as it is, and make sure no link in the main menu is broken "
            "afterwards. Then call finish."
        )

    def make_env(self, instance: TaskInstance) -> WebsiteEnv:
        return WebsiteEnv(instance, self.world(instance.seed, instance.params))

    def baseline_tools(self) -> tuple[ToolSpec, ...]:
        return TOOLS

    def optional_tools(self) -> tuple[ToolSpec, ...]:
        """Helper tools the environment offers beside the baseline's (domain computation over data the base
        tools expose); an `add_tool` edit naming one adds it to a harness (`coevolve.tasks.helpers`)."""
        return HELPER_TOOLS

    # ------------------------------------------------------------------ solution
    def plan(self, instance: TaskInstance, knowledge: Knowledge) -> list[PlanStep]:
        return plan(self.world(instance.seed, instance.params), knowledge)

    def check(self, env: TaskEnv) -> Outcome:
        assert isinstance(env, WebsiteEnv)
        return check(env, self.plan(env.instance, self.full_knowledge()))


def _op_text(op: tuple[str, ...]) -> str:
    kind = op[0]
    if kind == "rename":
        return f'Rename the menu item "{op[1]}" to "{op[2]}" (same target).'
    if kind == "move_under":
        return f'Move the item "{op[1]}" so that it becomes the last sub-item of "{op[2]}".'
    if kind == "remove":
        return f'Remove the item "{op[1]}".'
    if kind == "add_under":
        return f'Add the page "{op[1]}" as the last sub-item of "{op[2]}", labelled with the page title.'
    return f'Move the top-level item "{op[1]}" to the end of the menu.'

