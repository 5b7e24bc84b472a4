"""pending_changes: admin changes that wait for a second person; audit_log.approved_by

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-06 04:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0007'
down_revision = '0006'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'pending_changes',
        sa.Column('id', sa.Integer(), primary_key=True, autoincrement=True),
        sa.Column('action', sa.String(100), nullable=False),
        sa.Column('object', sa.String(300), nullable=False),
        sa.Column('params', sa.JSON(), nullable=False),
        sa.Column('reason', sa.String(300), nullable=False),
        sa.Column('proposed_by', sa.String(200), nullable=False),
        sa.Column('proposed_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('status', sa.String(20), nullable=False),
        sa.Column('decided_by', sa.String(200), nullable=True),
        sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('outcome', sa.JSON(), nullable=True),
    )
    with op.batch_alter_table('audit_log') as batch:
        batch.add_column(sa.Column('approved_by', sa.String(200), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('audit_log') as batch:
        batch.drop_column('approved_by')
    op.drop_table('pending_changes')
