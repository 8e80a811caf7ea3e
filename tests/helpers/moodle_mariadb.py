"""Moodle's tables in a real MariaDB, typed as Moodle's installer creates them there, for the tests of the
Moodle source on MySQL/MariaDB (the same rows as helpers.moodledb's PostgreSQL, through the same methods)."""

from helpers.moodledb import READER, READER_PASSWORD, READER_TABLES, Enrolments, log_values

# Moodle's MySQL generator (lib/ddl/mysql_sql_generator.php): int(10) is BIGINT(10), int(5) MEDIUMINT(5),
# int(4) SMALLINT(4), int(1..2) TINYINT, number(10,5) DECIMAL(10,5), text LONGTEXT, char VARCHAR; InnoDB,
# utf8mb4 with the database's collation (utf8mb4_unicode_ci by default), ROW_FORMAT=COMPRESSED (Barracuda).
TABLE = "ENGINE=InnoDB DEFAULT CHARSET={charset} COLLATE={collation} ROW_FORMAT=COMPRESSED"
MOODLE_DDL = """
CREATE TABLE mdl_logstore_standard_log (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    eventname VARCHAR(255) NOT NULL DEFAULT '',
    component VARCHAR(100) NOT NULL DEFAULT '',
    action VARCHAR(100) NOT NULL DEFAULT '',
    target VARCHAR(100) NOT NULL DEFAULT '',
    objecttable VARCHAR(50) DEFAULT NULL,
    objectid BIGINT(10) DEFAULT NULL,
    crud VARCHAR(1) NOT NULL DEFAULT '',
    edulevel TINYINT(1) NOT NULL,
    contextid BIGINT(10) NOT NULL,
    contextlevel BIGINT(10) NOT NULL,
    contextinstanceid BIGINT(10) NOT NULL,
    userid BIGINT(10) NOT NULL,
    courseid BIGINT(10) DEFAULT NULL,
    relateduserid BIGINT(10) DEFAULT NULL,
    anonymous TINYINT(1) NOT NULL DEFAULT 0,
    other LONGTEXT,
    timecreated BIGINT(10) NOT NULL,
    origin VARCHAR(10) DEFAULT NULL,
    ip VARCHAR(45) DEFAULT NULL,
    realuserid BIGINT(10) DEFAULT NULL,
    PRIMARY KEY (id),
    KEY mdl_logsstanlog_tim_ix (timecreated),
    KEY mdl_logsstanlog_couanotim_ix (courseid, anonymous, timecreated),
    KEY mdl_logsstanlog_useconconcr_ix (userid, contextlevel, contextinstanceid, crud, edulevel, timecreated)
) {table} COMMENT='Standard log table';
CREATE TABLE mdl_grade_items (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    courseid BIGINT(10) DEFAULT NULL,
    itemname VARCHAR(255) DEFAULT NULL,
    itemtype VARCHAR(30) NOT NULL DEFAULT '',
    itemmodule VARCHAR(30) DEFAULT NULL,
    iteminstance BIGINT(10) DEFAULT NULL,
    gradetype SMALLINT(4) NOT NULL DEFAULT 1,
    grademax DECIMAL(10,5) NOT NULL DEFAULT 100.00000,
    grademin DECIMAL(10,5) NOT NULL DEFAULT 0.00000,
    PRIMARY KEY (id)
) {table};
CREATE TABLE mdl_course (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    category BIGINT(10) NOT NULL DEFAULT 0,
    sortorder BIGINT(10) NOT NULL DEFAULT 0,
    fullname VARCHAR(1333) NOT NULL DEFAULT '',
    shortname VARCHAR(255) NOT NULL DEFAULT '',
    idnumber VARCHAR(100) NOT NULL DEFAULT '',
    summary LONGTEXT,
    format VARCHAR(21) NOT NULL DEFAULT 'topics',
    newsitems MEDIUMINT(5) NOT NULL DEFAULT 1,
    startdate BIGINT(10) NOT NULL DEFAULT 0,
    enddate BIGINT(10) NOT NULL DEFAULT 0,
    visible TINYINT(1) NOT NULL DEFAULT 1,
    timecreated BIGINT(10) NOT NULL DEFAULT 0,
    timemodified BIGINT(10) NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    KEY mdl_cour_cat_ix (category),
    KEY mdl_cour_sho_ix (shortname)
) {table};
CREATE TABLE mdl_course_categories (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    name VARCHAR(255) NOT NULL DEFAULT '',
    idnumber VARCHAR(100) DEFAULT NULL,
    description LONGTEXT,
    parent BIGINT(10) NOT NULL DEFAULT 0,
    sortorder BIGINT(10) NOT NULL DEFAULT 0,
    coursecount BIGINT(10) NOT NULL DEFAULT 0,
    visible TINYINT(1) NOT NULL DEFAULT 1,
    timemodified BIGINT(10) NOT NULL DEFAULT 0,
    depth BIGINT(10) NOT NULL DEFAULT 0,
    path VARCHAR(255) NOT NULL DEFAULT '',
    PRIMARY KEY (id)
) {table};
INSERT INTO mdl_course (id, category, fullname, shortname, format) VALUES (1, 0, 'Moodle Site', 'moodle', 'site')
"""
# The enrolment tables as Moodle's MySQL generator creates them (helpers.moodledb.ENROLMENT_DDL's on PostgreSQL).
ENROLMENT_DDL = """
CREATE TABLE mdl_enrol (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    enrol VARCHAR(20) NOT NULL DEFAULT '',
    status BIGINT(10) NOT NULL DEFAULT 0,
    courseid BIGINT(10) NOT NULL,
    sortorder BIGINT(10) NOT NULL DEFAULT 0,
    name VARCHAR(255) DEFAULT NULL,
    enrolperiod BIGINT(10) DEFAULT 0,
    enrolstartdate BIGINT(10) DEFAULT 0,
    enrolenddate BIGINT(10) DEFAULT 0,
    roleid BIGINT(10) DEFAULT 0,
    timecreated BIGINT(10) NOT NULL DEFAULT 0,
    timemodified BIGINT(10) NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    KEY mdl_enro_enr_ix (enrol),
    KEY mdl_enro_cou_ix (courseid)
) {table};
CREATE TABLE mdl_user_enrolments (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    status BIGINT(10) NOT NULL DEFAULT 0,
    enrolid BIGINT(10) NOT NULL,
    userid BIGINT(10) NOT NULL,
    timestart BIGINT(10) NOT NULL DEFAULT 0,
    timeend BIGINT(10) NOT NULL DEFAULT 2147483647,
    modifierid BIGINT(10) NOT NULL DEFAULT 0,
    timecreated BIGINT(10) NOT NULL DEFAULT 0,
    timemodified BIGINT(10) NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    UNIQUE KEY mdl_userenro_enruse_uix (enrolid, userid),
    KEY mdl_userenro_enr_ix (enrolid),
    KEY mdl_userenro_use_ix (userid),
    KEY mdl_userenro_mod_ix (modifierid)
) {table};
CREATE TABLE mdl_role (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    name VARCHAR(255) NOT NULL DEFAULT '',
    shortname VARCHAR(100) NOT NULL DEFAULT '',
    description LONGTEXT NOT NULL,
    sortorder BIGINT(10) NOT NULL DEFAULT 0,
    archetype VARCHAR(30) NOT NULL DEFAULT '',
    PRIMARY KEY (id),
    UNIQUE KEY mdl_role_sor_uix (sortorder),
    UNIQUE KEY mdl_role_sho_uix (shortname)
) {table};
CREATE TABLE mdl_context (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    contextlevel BIGINT(10) NOT NULL DEFAULT 0,
    instanceid BIGINT(10) NOT NULL DEFAULT 0,
    path VARCHAR(255) DEFAULT NULL,
    depth TINYINT(2) NOT NULL DEFAULT 0,
    locked TINYINT(2) NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    UNIQUE KEY mdl_cont_conins_uix (contextlevel, instanceid)
) {table};
CREATE TABLE mdl_role_assignments (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    roleid BIGINT(10) NOT NULL DEFAULT 0,
    contextid BIGINT(10) NOT NULL DEFAULT 0,
    userid BIGINT(10) NOT NULL DEFAULT 0,
    timemodified BIGINT(10) NOT NULL DEFAULT 0,
    modifierid BIGINT(10) NOT NULL DEFAULT 0,
    component VARCHAR(100) NOT NULL DEFAULT '',
    itemid BIGINT(10) NOT NULL DEFAULT 0,
    sortorder BIGINT(10) NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    KEY mdl_roleassi_rolcon_ix (roleid, contextid),
    KEY mdl_roleassi_useconrol_ix (userid, contextid, roleid),
    KEY mdl_roleassi_con_ix (contextid)
) {table};
INSERT INTO mdl_role (id, shortname, description, sortorder, archetype) VALUES (1, 'manager', '', 1, 'manager'),
    (2, 'coursecreator', '', 2, 'coursecreator'), (3, 'editingteacher', '', 3, 'editingteacher'),
    (4, 'teacher', '', 4, 'teacher'), (5, 'student', '', 5, 'student'), (6, 'guest', '', 6, 'guest')
"""
CONFIG_PLUGINS_DDL = """
CREATE TABLE mdl_config_plugins (
    id BIGINT(10) NOT NULL AUTO_INCREMENT,
    plugin VARCHAR(100) NOT NULL DEFAULT 'core',
    name VARCHAR(100) NOT NULL DEFAULT '',
    value LONGTEXT NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY mdl_confplug_plunam_uix (plugin, name)
) {table}
"""
TABLES = READER_TABLES


def create_reader(server):
    """The account the source reads with, from 127.0.0.1 (the tests' URLs) and the socket."""
    server.admin(f"CREATE USER IF NOT EXISTS {READER}@'%' IDENTIFIED BY '{READER_PASSWORD}'")


class MariaDBMoodle(Enrolments):
    """A new database on a MariaDBServer holding Moodle's tables, readable (SELECT only) by the reader."""

    def __init__(self, server, charset="utf8mb4", collation="utf8mb4_unicode_ci"):
        self.server = server
        self.name = server.new_database(charset, collation)
        self.table = TABLE.format(charset=charset, collation=collation)
        self.sql(MOODLE_DDL.format(table=self.table))
        self.sql(ENROLMENT_DDL.format(table=self.table))
        self.grant("SELECT", *TABLES)

    @property
    def url(self):
        return self.server.url(self.name, READER)

    def sql(self, statement, parameters=None):
        if parameters is not None:
            return self.server.admin(statement, self.name, parameters)
        return self.server.admin(statement, self.name)

    def grant(self, privilege, *tables):
        for table in tables:
            self.sql(f"GRANT {privilege} ON {self.name}.{table} TO {READER}@'%'")

    def revoke(self, privilege, *tables):
        for table in tables:
            self.sql(f"REVOKE {privilege} ON {self.name}.{table} FROM {READER}@'%'")

    def insert(self, table, values):
        """Insert one row; return its id."""
        return self._insert(table, values, " RETURNING id")[0][0]

    def _insert(self, table, values, returning=""):
        marks = ", ".join(["%s"] * len(values))
        return self.sql(f"INSERT INTO {table} ({', '.join(values)}) VALUES ({marks}){returning}",
                        tuple(values.values()))

    def log(self, kind, user, course, at, related=None, other=None, anonymous=0, realuser=None, id=None):
        values = log_values(kind, user, course, at, related, other, anonymous, realuser, id)
        return self._insert("mdl_logstore_standard_log", values, " RETURNING id")[0][0]

    def category(self, number, name, parent=0, path=None):
        path = path or f"/{number}"
        self._insert("mdl_course_categories", {"id": number, "name": name, "parent": parent, "path": path,
                                               "depth": path.count("/")})

    def course(self, number, fullname, shortname, category=0, startdate=0, enddate=0):
        self._insert("mdl_course", {"id": number, "category": category, "fullname": fullname,
                                    "shortname": shortname, "startdate": startdate, "enddate": enddate})

    def rename(self, number, fullname):
        self.sql("UPDATE mdl_course SET fullname = %s WHERE id = %s", (fullname, number))

    def grade_item(self, item, course, grademin, grademax):
        self._insert("mdl_grade_items", {"id": item, "courseid": course, "itemname": "Quiz", "itemtype": "mod",
                                         "itemmodule": "quiz", "grademin": grademin, "grademax": grademax})

    def log_lifetime(self, days):
        """Set Moodle's logstore_standard loglifetime (as its admin page does) and let the reader read it."""
        self.sql(CONFIG_PLUGINS_DDL.format(table=self.table))
        self._insert("mdl_config_plugins", {"plugin": "logstore_standard", "name": "loglifetime", "value": str(days)})
        self.grant("SELECT", "mdl_config_plugins")
